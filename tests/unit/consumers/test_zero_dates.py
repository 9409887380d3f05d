"""Zero and partial dates: the policy every non-MySQL kind shares, and its count."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from consumers.elasticsearch.types import RowEncoder
from consumers.metrics import ConsumerMetrics
from consumers.zero_dates import (
    ZeroDateRefused,
    ZeroDateTally,
    count_zero_dates,
    zero_or_value,
)
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlValue

SPECS = [ColumnSpec(1, "id", "INT", primary_key=True, nullable=False),
         ColumnSpec(2, "d", "DATE"), ColumnSpec(3, "t", "DATETIME"),
         ColumnSpec(4, "s", "VARCHAR", length=40)]
ROWS: list[list[ThlValue]] = [[1, "0000-00-00", "2024-03-00 10:00:00", "0000-00-00"],
        [2, "2024-03-05", "2024-03-05 10:00:00", "x"]]


def test_the_policy() -> None:
    assert zero_or_value("0000-00-00", "d", "null") == (None, True)
    assert zero_or_value("2024-00-00", "d", "text") == ("2024-00-00", False)
    assert zero_or_value("2024-03-05", "d", "error") == ("2024-03-05", False)
    with pytest.raises(ZeroDateRefused, match="column d: zero date '0000-00-00'"):
        zero_or_value("0000-00-00", "d", "error")


def test_elasticsearch_documents_hold_null_for_zero_dates_and_text_stays_text() -> None:
    encoder = RowEncoder(SPECS)
    assert encoder.values(ROWS[0]) == [1, None, None, "0000-00-00"]
    assert encoder.values(ROWS[1]) == ROWS[1]
    with pytest.raises(ZeroDateRefused):
        RowEncoder(SPECS, "error").values(ROWS[0])


def _changed(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("trep_values_changed_total",
                                     {"service": "svc", "group": "g", "kind": "zero_date"})


def test_the_count_follows_commits_not_rolled_back_blocks(
        caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    tally = ZeroDateTally("es", ConsumerMetrics(registry, "svc", "g"),
                          logging.getLogger("test.zero"))
    assert _changed(registry) == 0
    change = RowChange(RowAction.INSERT, "s", "t", SPECS, [], ROWS)
    count_zero_dates(tally, "s.t", change)
    tally.rollback()
    tally.commit(5)
    assert _changed(registry) == 0
    count_zero_dates(tally, "s.t", change)
    with caplog.at_level(logging.WARNING, "test.zero"):
        tally.commit(6)
    assert _changed(registry) == 2  # the DATE and the DATETIME; the VARCHAR is text
    assert "s.t.d: 1 zero date(s) stored as NULL in the block up to seqno 6" in caplog.text


def test_a_block_whose_commit_finishes_later_counts_its_own_dates_only() -> None:
    """A warehouse block's position is written while the next block is staged: the
    count taken at its commit is its own, and the next block's rollback keeps it."""
    registry = CollectorRegistry()
    tally = ZeroDateTally("wh", ConsumerMetrics(registry, "svc", "g"),
                          logging.getLogger("test.zero"))
    change = RowChange(RowAction.INSERT, "s", "t", SPECS, [], ROWS)
    count_zero_dates(tally, "s.t", change)
    first = tally.take()
    count_zero_dates(tally, "s.t", change)
    count_zero_dates(tally, "s.t", change)
    tally.count(first, 7)
    assert _changed(registry) == 2
    tally.rollback()
    tally.commit(8)
    assert _changed(registry) == 2
