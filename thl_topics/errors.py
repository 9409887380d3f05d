"""Errors of the THL topic layer; each says where (topic, partition, offset) and why."""

from __future__ import annotations

from confluent_kafka import KafkaError

#: librdkafka's own codes for a broker that is down or silent.
_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                KafkaError._MSG_TIMED_OUT, KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT}


def is_passing(err: KafkaError) -> bool:
    """True when Kafka says the failure may pass (retriable, abortable, broker unreachable)."""
    return bool(err.retriable() or err.txn_requires_abort() or err.code() in _UNREACHABLE)


class ThlError(RuntimeError):
    """Base class of THL topic errors."""


class ThlUnavailable(ThlError):
    """Kafka did not answer, or refused for a reason that passes (broker down, coordinator
    moving, timeout): the operation may succeed if tried again from a known position."""


class ThlDecodeError(ThlError):
    """A record of the THL topic could not be decoded into a THL event."""

    def __init__(self, reason: str, *, topic: str | None = None,
                 partition: int | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.topic = topic
        self.partition = partition
        self.offset = offset
        where = "THL record"
        if topic is not None:
            where += f" {topic}"
            if partition is not None:
                where += f"[{partition}]"
        if offset is not None:
            where += f" at offset {offset}"
        super().__init__(f"{where}: cannot decode: {reason}")


class ThlTopicMissing(ThlError):
    """The THL topic does not exist (yet): no extractor has created it."""


class KafkaAccessError(ThlError):
    """A Kafka broker refused this client: wrong credentials, an untrusted certificate, no
    permission. Terminal: retrying cannot help until the operator fixes the settings."""

    def __init__(self, message: str, *, broker: str = "") -> None:
        super().__init__(message)
        #: The broker that refused, as ``host:port``.
        self.broker = broker


class KafkaSettingsError(ThlError):
    """librdkafka refused the client's settings (an unknown property, an unreadable file)."""
