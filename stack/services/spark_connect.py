"""A Spark Connect server with Delta Lake: one long-lived Spark for many warehouse groups.

``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` from the
pyspark distribution (its ``jars/`` ships the Connect server), ``local[2]``, with the stack's
Delta settings (``spark.base_conf``), gRPC on 127.0.0.1. A warehouse group with
``spark.remote: sc://127.0.0.1:<port>`` is a thin client of it: starting or killing the
group costs no JVM. Port ``TREP_SPARK_CONNECT_PORT`` (default 15002).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pyspark

from stack import process
from stack.errors import StackError
from stack.service import Service
from stack.services.spark import SMALL_BLOCKS, Spark, base_conf
from stack.settings import HOST, JAVA_HOME, port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


class SparkConnect(Service):
    """The Connect server; ``url`` is what a group's ``spark.remote`` names."""

    name = "spark-connect"
    start_timeout = 180.0

    @property
    def port(self) -> int:
        return port(self.name)

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def group_spark(self) -> dict[str, object]:
        """The ``spark:`` section of a warehouse target that uses this server."""
        return {"remote": self.url, "conf": dict(SMALL_BLOCKS)}

    def install(self) -> None:
        Spark().install()  # JDK 17 check, the Delta jars
        if not any(SPARK_HOME.glob("jars/spark-connect_*.jar")):
            raise StackError(self.name, f"no Spark Connect jar in {SPARK_HOME / 'jars'}",
                             self.log)

    def launch(self) -> None:
        # C2 kept: one JVM runs every group's MERGEs for the whole session. Six warehouse
        # conformance tests one after another: 165 s with C2, 189-200 s with C1 only.
        # SQL interpreted (spark.INTERPRETED): the stack's groups apply small blocks.
        conf = {**base_conf(self.dir / "warehouse", quick_jvm=False),
                "spark.connect.grpc.binding.address": HOST,
                "spark.connect.grpc.binding.port": str(self.port),
                # A group's block of 100,000 rows (or one row of 64 MiB) in one message.
                "spark.connect.grpc.maxInboundMessageSize": str(256 << 20),
                # Several groups at once, each with its own session: 2 cores, 3 GiB.
                "spark.driver.memory": "3g",
                "spark.sql.shuffle.partitions": "4"}
        argv = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[2]",
                "--class", CONNECT_SERVER, "--name", "tungsten-spark-connect"]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        argv.append("spark-internal")
        process.spawn(self.name, argv, log=self.log, pid_file=self.pid_file,
                      env={"SPARK_HOME": str(SPARK_HOME), "JAVA_HOME": str(JAVA_HOME),
                           "SPARK_LOCAL_IP": HOST, "SPARK_CONNECT_MODE_ENABLED": "0"})

    def ready(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1):
                return True
        except OSError:
            return False

    def running(self) -> bool:
        return process.read_pid(self.pid_file) is not None

    def stop(self) -> None:
        process.stop_pid(self.pid_file)

    def version(self) -> str:
        return f"Spark Connect {pyspark.__version__}"


def service() -> SparkConnect:
    """The local Spark Connect server."""
    return SparkConnect()
