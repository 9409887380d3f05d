"""Which extractor failures are retried from the THL tail and which stop it."""

from __future__ import annotations

import pymysql
import pytest
import sqlalchemy.exc as sa_exc
from confluent_kafka import KafkaError, KafkaException

from extractor.errors import BinlogPurgedError, ExtractorError, ThlCommitUnknown, is_transient
from thl_topics.errors import ThlDecodeError, ThlError, ThlUnavailable, is_passing
from thl_topics.producer import ProducerFenced


def _db(code: int, message: str = "x") -> sa_exc.OperationalError:
    return sa_exc.OperationalError("SELECT 1", {}, pymysql.err.OperationalError(code, message))


@pytest.mark.parametrize("exc", [
    pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'"),
    pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"),
    pymysql.err.OperationalError(1053, "Server shutdown in progress"),
    pymysql.err.InterfaceError(0, ""),
    _db(2006, "MySQL server has gone away"),
    ThlCommitUnknown("commit timed out"),
    ThlUnavailable("no answer from Kafka within 5 s"),
    KafkaException(KafkaError(KafkaError._TRANSPORT)),
    KafkaException(KafkaError(KafkaError._TIMED_OUT)),
])
def test_unreachable_source_or_kafka_is_retried(exc: BaseException) -> None:
    assert is_transient(exc)


@pytest.mark.parametrize("exc", [
    BinlogPurgedError("cannot read the binlog at mysql-bin.000001 position 4"),
    ExtractorError("the THL tail does not decode"),
    ProducerFenced("producer fenced by a newer extractor"),
    ThlDecodeError("bad fingerprint", topic="thl.x", partition=0, offset=3),
    ThlError("delivery failed: Broker: Message size too large"),
    pymysql.err.OperationalError(1045, "Access denied for user 'repl'"),
    pymysql.err.OperationalError(1236, "Could not find first log file name"),
    _db(1146, "Table 'x.y' doesn't exist"),
    KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
    ValueError("a bug"),
])
def test_anything_else_stops_the_extractor(exc: BaseException) -> None:
    assert not is_transient(exc)


def test_kafka_says_which_errors_pass() -> None:
    assert is_passing(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert is_passing(KafkaError(KafkaError.NOT_COORDINATOR, retriable=True))
    assert not is_passing(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
