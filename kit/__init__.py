"""cronfleet: a distributed job scheduler kit (PostgreSQL + Kafka) and its capacity model."""

__version__ = "0.1.0"
