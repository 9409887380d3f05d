"""Progress of long runs: plain log lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io
import logging

import pytest

from replicator.progress import CatchUp, RunProgress


def test_plain_lines_carry_rate_and_eta(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="progress")
    with RunProgress("export", 100, 199, stream=io.StringIO(), interval=0.0) as run:
        run.advance_to(149, 5000)
        assert run.done == 50 and run.rows == 5000 and run.eta() is not None
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("export: seqno 149 of 199 (50.0 %), 5,000 rows, ")
    assert "rows/s, ETA " in lines[0] and "done in" in lines[-1]


def test_a_terminal_gets_a_bar() -> None:
    out = io.StringIO()
    run = RunProgress("rebuild", 0, 9, stream=out, terminal=True)
    run.advance_to(9, 10)
    run.close()
    text = out.getvalue()
    assert "rebuild" in text and "10/10" in text and "rows/s" in text


def test_catch_up_shows_only_a_real_backlog(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="progress")
    small = CatchUp("g", threshold=100)
    small.start(10, 50)
    assert small._run is None
    big = CatchUp("g", threshold=100)
    big.start(-1, 999)
    assert big._run is not None and big._run.total == 1000
    big.committed(999, 42)
    assert big._run is None
    assert any("catching up 1000 seqnos" in r.getMessage() for r in caplog.records)
