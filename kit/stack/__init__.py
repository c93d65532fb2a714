"""The local stack: a real PostgreSQL and a real Kafka broker for the kit and its tests."""
