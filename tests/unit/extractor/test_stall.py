"""The stall watchdog's judgement: no binlog event, or read transactions not committed."""

from __future__ import annotations

import threading
import time

from extractor.binlog_position import BinlogPosition
from extractor.stall import Progress, Watchdog, stall_text


def test_an_extractor_that_reads_and_commits_is_not_stalled() -> None:
    progress = Progress(last_event_at=100.0, read_at=BinlogPosition("mariadb-bin.000001", 4))
    assert stall_text(progress, 129.0, 30) == "NONE"
    progress.last_event_at, progress.pending_since, progress.pending = 138.0, 110.0, 3
    assert stall_text(progress, 139.0, 30) == "NONE"


def test_no_binlog_event_not_even_a_heartbeat_is_a_stall() -> None:
    progress = Progress(last_event_at=100.0, read_at=BinlogPosition("mariadb-bin.000001", 4))
    text = stall_text(progress, 131.0, 30)
    assert text.startswith("no binlog event for 31 s")
    assert "read up to mariadb-bin.000001:0000000000000004;0" in text


def test_transactions_read_and_not_committed_are_a_stall() -> None:
    progress = Progress(last_event_at=200.0, pending_since=150.0, pending=7)
    assert stall_text(progress, 200.5, 30).startswith(
        "7 transaction(s) read but not committed to the THL for 50 s")


def test_the_watchdog_reports_a_stall_and_the_recovery_once_each() -> None:
    progress = Progress(last_event_at=0.0)  # monotonic 0: long ago
    reports: list[str] = []
    seen = threading.Event()

    def report(text: str) -> None:
        reports.append(text)
        seen.set()

    dog = Watchdog(progress, 0.2, report)
    dog.start()
    try:
        assert seen.wait(5)
        assert reports[0].startswith("no binlog event")
        seen.clear()
        progress.last_event_at = time.monotonic() + 3600  # moving again
        assert seen.wait(5)
        assert reports[-1] == "NONE"
    finally:
        dog.stop()
    assert len(reports) == 2
