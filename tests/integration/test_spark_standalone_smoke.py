"""The Spark standalone cluster of the stack: a master with one live worker on 127.0.0.1."""

from __future__ import annotations

from stack.services.spark_standalone import SparkStandalone


def test_master_has_a_live_worker_with_one_core(spark_standalone: SparkStandalone) -> None:
    status = spark_standalone.status()
    assert status.up and status.port == spark_standalone.port
    state = spark_standalone.master_state()
    assert state["url"] == spark_standalone.url
    workers = state["workers"]
    assert isinstance(workers, list)
    alive = [w for w in workers if w["state"] == "ALIVE"]
    assert len(alive) == 1 and alive[0]["cores"] == 1 and alive[0]["host"] == "127.0.0.1"
