"""The JVM that pyspark starts for this process: ending it on purpose.

The local stack's Spark sessions (``stack/services/spark.py``), the warehouse applier's
(``consumers/warehouse/session.py``, which ends a JVM that stopped answering) and the
class-data archive's build all need it: it lives in stack/, which the warehouse may import
and which imports no consumer.
"""

from __future__ import annotations

import subprocess


def end_jvm(timeout: float = 30.0) -> None:
    """End this process's Spark JVM (pyspark's gateway) and wait until it exits.

    ``spark.stop()`` alone keeps the gateway JVM (about 300 MB) alive until Python exits; the
    JVM quits when its stdin pipe closes, and only then writes what it writes at exit (a
    class-data archive). A later session starts a new JVM.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is None:
        return
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

