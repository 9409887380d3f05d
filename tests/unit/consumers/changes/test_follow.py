"""Kept folds of change topics: each look-up reads on from where the last one stopped, and
starts again from the beginning when the kept fold cannot be trusted."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from consumers.changes import follow
from consumers.changes.follow import TopicFollower
from consumers.changes.readback import Change, Span, materialize

TOPIC = "svc.s.child"


def _create(offset: int, seqno: int, key: int, value: str, partition: int = 0) -> Change:
    # Row ``offset`` of its seqno: every record a (seqno, row) of its own, as the group writes.
    return Change(TOPIC, partition, offset, seqno, offset, {"id": key}, "c", None,
                  {"id": key, "v": value})


def _delete(offset: int, seqno: int, key: int, partition: int = 0) -> Change:
    return Change(TOPIC, partition, offset, seqno, offset, {"id": key}, "d", {"id": key}, None)


class _Log:
    """A topic's records as a fake reader serves them: from ``span.start``, up to the
    group's own open transaction (``span.own``), filling ``span.reached``."""

    def __init__(self) -> None:
        self.records: list[Change] = []
        self.reads: list[dict[tuple[str, int], int]] = []
        self.fail_from: int | None = None

    def records_of(self, topics: Iterable[str], timeout: float = 30.0,
                   committed: bool = True, span: Span | None = None,
                   consumer: Any = None, admin: Any = None) -> Iterator[Change]:
        assert span is not None and consumer is not None
        self.reads.append(dict(span.start))
        where = (TOPIC, 0)
        start = span.start.get(where, 0)
        if self.fail_from is not None and start and start < self.fail_from:
            raise RuntimeError("Broker: Offset out of range")
        end = min(len(self.records), span.own.get(where, len(self.records)))
        yield from self.records[start:end]
        span.reached[where] = end


class _Consumer:
    """What the follower keeps between reads (the fake reader only checks it is there)."""

    def close(self) -> None:
        pass


@pytest.fixture
def follower(monkeypatch: pytest.MonkeyPatch) -> tuple[TopicFollower, _Log, dict[str, Any]]:
    log = _Log()
    topic = {"id": "A"}
    monkeypatch.setattr(follow, "reading_consumer", lambda kafka: _Consumer())
    f = TopicFollower({"bootstrap.servers": "unused:9092"}, None, 5.0)
    monkeypatch.setattr(f._reader, "records", log.records_of)
    monkeypatch.setattr(f, "_topic_id", lambda name: topic["id"])
    monkeypatch.setattr(f, "_admin_client", lambda: None)
    return f, log, topic


def _ids(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return sorted((r["id"], r["v"]) for r in rows)


def test_a_look_up_reads_on_from_the_last_and_folds_as_a_whole_read(
        follower: tuple[TopicFollower, _Log, dict[str, Any]]) -> None:
    f, log, _ = follower
    log.records = [_create(0, 1, 1, "a"), _create(1, 1, 2, "b")]
    assert _ids(f.rows(TOPIC, True, {})) == [(1, "a"), (2, "b")]
    log.records += [_delete(2, 2, 1), _create(3, 3, 3, "c"), _create(4, 3, 2, "b2")]
    assert _ids(f.rows(TOPIC, True, {})) == [(2, "b2"), (3, "c")]
    assert log.reads == [{}, {(TOPIC, 0): 2}]
    assert _ids(f.rows(TOPIC, True, {})) == _ids(materialize(log.records, True))


def test_the_open_blocks_own_records_are_left_for_the_read_after_its_commit(
        follower: tuple[TopicFollower, _Log, dict[str, Any]]) -> None:
    f, log, _ = follower
    log.records = [_create(0, 1, 1, "a"), _create(1, 2, 2, "own")]
    assert _ids(f.rows(TOPIC, True, {(TOPIC, 0): 1})) == [(1, "a")]
    # The block committed: the next look-up takes its record from the topic.
    assert _ids(f.rows(TOPIC, True, {})) == [(1, "a"), (2, "own")]
    assert log.reads[-1] == {(TOPIC, 0): 1}


def test_a_topic_created_again_or_a_key_gained_is_read_from_its_beginning(
        follower: tuple[TopicFollower, _Log, dict[str, Any]]) -> None:
    f, log, topic = follower
    log.records = [_create(0, 1, 1, "a"), _create(1, 1, 2, "b")]
    f.rows(TOPIC, True, {})
    topic["id"] = "B"
    log.records = [_create(0, 5, 7, "new")]
    assert _ids(f.rows(TOPIC, True, {})) == [(7, "new")]
    assert log.reads[-1] == {}
    f.rows(TOPIC, False, {})
    assert log.reads[-1] == {}


def test_a_failed_read_on_starts_again_and_a_failed_read_keeps_nothing(
        follower: tuple[TopicFollower, _Log, dict[str, Any]]) -> None:
    f, log, _ = follower
    log.records = [_create(0, 1, 1, "a"), _create(1, 1, 2, "b")]
    f.rows(TOPIC, True, {})
    log.records.append(_create(2, 2, 3, "c"))
    log.fail_from = 3  # records below offset 3 deleted: reading on from 2 fails
    assert _ids(f.rows(TOPIC, True, {})) == [(1, "a"), (2, "b"), (3, "c")]
    assert log.reads[-2:] == [{(TOPIC, 0): 2}, {}]

    def broken(*args: Any, **kwargs: Any) -> Iterator[Change]:
        yield log.records[0]
        raise TimeoutError("a transaction is still open")

    original = f._reader.records
    f._reader.records = broken  # type: ignore[method-assign]
    with pytest.raises(TimeoutError):
        f.rows(TOPIC, True, {})
    f._reader.records = original  # type: ignore[method-assign]
    log.fail_from = None
    assert _ids(f.rows(TOPIC, True, {})) == [(1, "a"), (2, "b"), (3, "c")]
    assert log.reads[-1] == {}
