"""A Spark standalone cluster (one master, one worker) from the pyspark distribution.

For the warehouse's cluster test: ``spark-class org.apache.spark.deploy.master.Master`` and
``...worker.Worker`` on 127.0.0.1, one core and 1 GiB for the worker. Started only by the
test that needs it (a session fixture), stopped after. Ports: ``TREP_SPARK_MASTER_PORT``
(default: the slot's first free port ``TREP_SLOT_FREE_PORTS``, else 17077); the worker and
the two web UIs take the three ports after it.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pyspark

from stack import process
from stack.errors import StackError
from stack.service import Service
from stack.services.spark import Spark, prepare_env
from stack.settings import HOST, JAVA_HOME

SPARK_HOME = Path(pyspark.__file__).resolve().parent


def master_port() -> int:
    """The master's RPC port."""
    explicit = os.environ.get("TREP_SPARK_MASTER_PORT")
    if explicit:
        return int(explicit)
    return int(os.environ.get("TREP_SLOT_FREE_PORTS", "17077"))


class SparkStandalone(Service):
    """Master + worker; ``port`` is the master's (``spark://127.0.0.1:<port>``)."""

    name = "spark-standalone"
    start_timeout = 120.0

    @property
    def port(self) -> int:
        return master_port()

    @property
    def url(self) -> str:
        """The master URL clients and ``spark-submit --master`` use."""
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_port(self) -> int:
        return self.port + 2

    @property
    def worker_pid_file(self) -> Path:
        return self.dir / "worker.pid"

    def install(self) -> None:
        Spark().install()  # JDK 17 check, jars the drivers pass along
        if not (SPARK_HOME / "bin" / "spark-class").exists():
            raise StackError(self.name, f"no bin/spark-class in {SPARK_HOME}", self.log)

    def _env(self) -> dict[str, str]:
        prepare_env()
        return {"SPARK_HOME": str(SPARK_HOME), "JAVA_HOME": str(JAVA_HOME),
                "SPARK_LOCAL_IP": HOST, "SPARK_DAEMON_MEMORY": "256m",
                "SPARK_WORKER_DIR": str(self.dir / "work"),
                "SPARK_LOG_DIR": str(self.dir), "SPARK_NO_DAEMONIZE": "1",
                "SPARK_CONF_DIR": str(self.dir / "conf")}

    def launch(self) -> None:
        (self.dir / "conf").mkdir(exist_ok=True)
        (self.dir / "work").mkdir(exist_ok=True)
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        env = self._env()
        process.spawn(self.name, [
            spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
            "--port", str(self.port), "--webui-port", str(self.ui_port)],
            log=self.log, pid_file=self.pid_file, env=env)
        process.spawn(self.name, [
            spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST,
            "--port", str(self.port + 1), "--webui-port", str(self.port + 3),
            "--cores", "1", "--memory", "1g", self.url],
            log=self.dir / "worker.log", pid_file=self.worker_pid_file, env=env)

    def master_state(self) -> dict[str, object]:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/",
                                    timeout=3) as answer:
            state: dict[str, object] = json.loads(answer.read())
        return state

    def ready(self) -> bool:
        try:
            state = self.master_state()
        except (OSError, ValueError):
            return False
        return state.get("status") == "ALIVE" and int(str(state.get("aliveworkers", 0))) >= 1

    def running(self) -> bool:
        return process.read_pid(self.pid_file) is not None and \
            process.read_pid(self.worker_pid_file) is not None

    def stop(self) -> None:
        process.stop_pid(self.worker_pid_file)
        process.stop_pid(self.pid_file)

    def version(self) -> str:
        return f"Spark {pyspark.__version__} standalone"


def service() -> SparkStandalone:
    """The local Spark standalone cluster."""
    return SparkStandalone()
