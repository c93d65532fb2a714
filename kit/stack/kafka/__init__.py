"""The stack's Kafka broker; pom.xml beside this file lists the jars it runs from."""
