"""The same warehouse group on a real Spark standalone cluster (master + worker started
from the pyspark distribution on 127.0.0.1), through the spark-submit entry point."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from stack.services.spark import warehouse_spark
from stack.services.spark_standalone import SPARK_HOME, SparkStandalone
from stack.settings import REPO_ROOT

from .conftest import CraftedThl, delete, insert, spec, update

ITEM = [spec(1, "id", "INT", key=True), spec(2, "name", "VARCHAR", length=40)]


@pytest.mark.slow
def test_spark_submit_runs_the_warehouse_group_on_a_standalone_cluster(
        crafted: CraftedThl, spark_standalone: SparkStandalone) -> None:
    spark = warehouse_spark(spark_standalone.url)
    conf = spark["conf"]
    assert isinstance(conf, dict)
    conf["spark.cores.max"] = "1"
    conf["spark.executor.memory"] = "512m"
    crafted.configure(spark=spark)
    crafted.publish(insert("s", "items", ITEM, [1, "one"], [2, "two"], [3, "three"]))
    crafted.publish(update("s", "items", ITEM, [2, "two"], [20, "twenty"]))
    last = crafted.publish(delete("s", "items", ITEM, [1, "one"]))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), SPARK_HOME=str(SPARK_HOME))
    log = crafted.config_path.with_suffix(".submit.log")
    with log.open("wb") as out:
        proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-submit"),
                                 "--master", spark_standalone.url,
                                 # The driver JVM is up before Python runs: Delta's jars
                                 # must be on its class path from the start.
                                 "--jars", str(conf["spark.jars"]),
                                 "--conf", "spark.driver.host=127.0.0.1",
                                 # ... and so must its JVM flags (the stack's quick JVM).
                                 "--driver-java-options",
                                 str(conf["spark.driver.extraJavaOptions"]),
                                 str(REPO_ROOT / "trep" / "warehouse.py"),
                                 "-c", str(crafted.config_path), "run", "-group", "w"],
                                stdout=out, stderr=out, env=env, cwd=REPO_ROOT,
                                # Its own process group: the driver's Python child goes
                                # with spark-submit (a terminate() alone left it running).
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while crafted.status().get("appliedLastSeqno", -1) < last:
            assert proc.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.5)
        apps = spark_standalone.master_state()["activeapps"]
        assert isinstance(apps, list) and len(apps) == 1, apps
        assert apps[0]["state"] == "RUNNING" and apps[0]["cores"] == 1
    finally:
        _stop_group(proc)
    assert crafted.rows("s", "items", ["id", "name", "_seqno"]) == [
        (20, "twenty", 1), (3, "three", 0)]


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to spark-submit's whole process group, SIGKILL if it lingers."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
    except ProcessLookupError:
        pass
    proc.wait(60)
