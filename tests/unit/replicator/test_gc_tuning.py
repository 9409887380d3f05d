"""The collector settings of a started replicator process."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from replicator.gc_tuning import GEN0_THRESHOLD, quiet_start, tune_for_throughput


@pytest.fixture
def restored() -> Iterator[None]:
    """This test process's collector as it was, afterwards."""
    before = gc.get_threshold()
    yield
    gc.enable()
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored")
def test_what_exists_at_start_is_frozen_and_the_youngest_generation_walked_less_often(
        ) -> None:
    middle, oldest = gc.get_threshold()[1:]
    kept = [object() for _ in range(10)]
    tune_for_throughput()
    assert gc.get_threshold() == (GEN0_THRESHOLD, middle, oldest)
    assert gc.get_freeze_count() > len(kept)
    # Cycles made afterwards are still found.
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1


@pytest.mark.usefixtures("restored")
def test_the_collector_rests_during_a_programs_start_only_and_only_in_that_program(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["/usr/local/bin/pytest"])
    quiet_start("trep-run", "trep/runner.py")
    assert gc.isenabled()  # a module imported by another program: untouched
    for argv0 in ("/opt/venv/bin/trep-run", "/repo/trep/runner.py"):
        monkeypatch.setattr("sys.argv", [argv0, "-c", "service.yml"])
        quiet_start("trep-run", "trep/runner.py")
        assert not gc.isenabled()
        tune_for_throughput()
        assert gc.isenabled()
