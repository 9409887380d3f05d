"""Which extractor failures are retried from the THL tail and which stop it."""

from __future__ import annotations

import pymysql
import pytest
import sqlalchemy.exc as sa_exc
from confluent_kafka import KafkaError, KafkaException

from extractor.errors import (
    BinlogPurgedError,
    ExtractorError,
    SameServerId,
    ThlCommitUnknown,
    is_transient,
)
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
    # The dump thread of this extractor's connection from before a restart (CI, 2026-11-28).
    SameServerId("the source already has a binlog client with server_id 1001"),
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


def test_a_dump_dropped_for_a_newer_client_with_its_server_id_is_retried_and_names_it(
        ) -> None:
    """MariaDB's error 4052 while the binlog is read (a newer client announced this
    extractor's server_id and the source dropped the older) becomes ``SameServerId``:
    retried (a standby that took over ends this leadership anyway), with the server_id and
    what to change in the message for the case of another client configured with it."""
    from extractor.config import ExtractorConfig
    from extractor.service import Extractor

    class Refused:
        log_file, log_pos = "mariadb-bin.000001", 4

        def __iter__(self) -> Refused:
            return self

        def __next__(self) -> object:
            raise pymysql.err.OperationalError(
                4052, "A slave with the same server_uuid/server_id as this slave has "
                "connected to the master")

    extractor = Extractor.__new__(Extractor)
    extractor.cfg = ExtractorConfig(server_id=4242)
    with pytest.raises(SameServerId, match="binlog client with server_id 4242") as caught:
        next(extractor._events(Refused()))
    assert "give each its own (extractor.server_id)" in str(caught.value)
    assert is_transient(caught.value)
