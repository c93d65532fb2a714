"""The run queue on Kafka: one topic per priority tier; a message is only a pointer
to a run row in PostgreSQL."""

from kit.transport.consumer import TieredConsumer
from kit.transport.message import (
    DEFAULT_TOPIC_PREFIX,
    MESSAGE_VERSION,
    MessageError,
    RunMessage,
    topic_for,
)
from kit.transport.publisher import PublishError, RunPublisher
from kit.transport.topics import TopicError, ensure_topics

__all__ = [
    "DEFAULT_TOPIC_PREFIX",
    "MESSAGE_VERSION",
    "MessageError",
    "PublishError",
    "RunMessage",
    "RunPublisher",
    "TieredConsumer",
    "TopicError",
    "ensure_topics",
    "topic_for",
]
