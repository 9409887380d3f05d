"""How change-topic errors map to the consumer's kinds: transient (retry) or data (stop).

Kafka: a broker away, a coordinator moving or an abortable transaction pass (transient);
a fenced producer means another process writes the group (PositionConflict); anything
else stops the group at the block's seqno. Schema registry: unreachable, 5xx or 429 pass;
a schema it refuses (409 incompatible, 422 invalid) is a data error at that seqno.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from consumers.errors import ConsumerError, DataError, PositionConflict, TransientError
from thl_topics.errors import is_passing

#: Another producer with our transactional id took over.
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def kafka_error(err: KafkaError, target: str, doing: str, seqno: int = -1) -> ConsumerError:
    """The consumer error of a Kafka error of the change-topic producer."""
    message = f"{target}: {doing}: {err.str()}"
    if err.code() in FENCED or err.code() == KafkaError._FATAL or err.fatal():
        return PositionConflict(
            f"{message}; another process applies this group (its transactional producer "
            "fenced this one): nothing of this block was published", seqno=seqno)
    if is_passing(err):
        return TransientError(message, seqno=seqno)
    return DataError(message, seqno=seqno)


def registry_error(status: int, text: str, target: str, doing: str,
                   seqno: int = -1) -> ConsumerError:
    """The consumer error of a schema registry answer (``status`` -1: no answer at all)."""
    message = f"schema registry {target}: {doing}: {text}"
    if status < 0 or status >= 500 or status in (408, 429):
        return TransientError(message, seqno=seqno)
    return DataError(message, seqno=seqno)
