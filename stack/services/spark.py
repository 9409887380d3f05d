"""Spark local (inside the client's Python process) with Delta Lake, Kafka and Avro sources.

pyspark (from PyPI) bundles Spark itself; the Delta, spark-sql-kafka and spark-avro jars are
fetched once with Maven and passed as ``spark.jars``, instead of being resolved at every
session start. There is no server: "up" means the jars are in place and ``JAVA_HOME`` is a
JDK 17 (Spark 4.0 fails on JDK 25). Sessions come from :func:`session`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyspark

from stack import class_archive
from stack.errors import StackError
from stack.fetch import maven_runtime_jars
from stack.service import Service
from stack.settings import HOST, JAVA_HOME, REPO_ROOT, cache_dir, service_dir
from stack.spark_jvm import end_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_VERSION = pyspark.__version__
DELTA_VERSION = "4.0.0"
COORDINATES = [
    f"io.delta:delta-spark_2.13:{DELTA_VERSION}",
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
    f"org.apache.spark:spark-avro_2.13:{SPARK_VERSION}",
]

_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
"""


def _artifact(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar.name)


def _java_major(java_home: Path) -> str | None:
    """The major version from the JDK's ``release`` file, without starting a JVM."""
    try:
        text = (java_home / "release").read_text()
    except OSError:
        return None
    found = re.search(r'^JAVA_VERSION="(\d+)', text, re.MULTILINE)
    return found.group(1) if found else None


class Spark(Service):
    """The Spark/Delta toolchain: fetched jars and a JDK 17, no process of its own."""

    name = "spark"

    @property
    def port(self) -> None:
        return None

    @property
    def jar_dir(self) -> Path:
        return cache_dir(f"spark-{SPARK_VERSION}-jars")

    def jars(self) -> list[Path]:
        """The extra jars, minus those pyspark already ships.

        The connectors' poms pull scala-library, slf4j, hadoop-client... at other versions
        than pyspark's own ``jars/``; two copies of a class on the classpath break Spark.
        """
        fetched = maven_runtime_jars(self.name, COORDINATES, self.jar_dir, log=self.log)
        bundled = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
        return [j for j in fetched if _artifact(j) not in bundled]

    def install(self) -> None:
        major = _java_major(JAVA_HOME)
        if major != "17":
            raise StackError(self.name, f"JAVA_HOME {JAVA_HOME} is JDK {major or 'missing'}, "
                                        "Spark 4.0 needs JDK 17 (set TREP_JAVA_HOME)", self.log)
        self.jars()

    def start(self) -> None:
        """Fetch the jars once and check the JDK; nothing runs until a session is built."""
        self.install()
        if not self.ready():
            raise StackError(self.name, f"jars missing from {self.jar_dir}", self.log)

    def launch(self) -> None:
        """Nothing to launch: the JVM starts with the first session."""

    def running(self) -> bool:
        return (self.jar_dir / ".complete").exists()

    def ready(self) -> bool:
        return (self.running() and _java_major(JAVA_HOME) == "17"
                and any(_artifact(j) == "delta-spark_2.13" for j in self.jar_dir.glob("*.jar")))

    def stop(self) -> None:
        """Stop a session this Python process holds, and its JVM; nothing else runs."""
        if "pyspark.sql" in sys.modules:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            if active is not None:
                stop_session(active)

    def version(self) -> str:
        return f"Spark {SPARK_VERSION} / Delta {DELTA_VERSION}"


def service() -> Spark:
    """The local Spark toolchain."""
    return Spark()


def prepare_env() -> Path:
    """Environment and log configuration every Spark JVM of the stack needs; its folder.

    pyspark starts the JVM with this process's environment (a JDK 25 on PATH breaks it), and
    child processes (``trep-run`` spawned by tests, ``spark-submit``) inherit it.
    """
    svc = Spark()
    svc.start()
    spark_dir = service_dir("spark")
    log4j = spark_dir / "log4j2.properties"
    log4j.write_text(_LOG4J.format(log=svc.log))
    os.environ["JAVA_HOME"] = str(JAVA_HOME)
    # Python workers (UDFs, RDD lambdas) must be this interpreter, with the same packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Without it Spark picks the first non-loopback interface for its block manager.
    os.environ["SPARK_LOCAL_IP"] = HOST
    os.environ["SPARK_LOCAL_DIRS"] = str(spark_dir / "tmp")
    # Python workers import this project's modules (THL decoding in executors).
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])
    return spark_dir


#: JVM flags of the stack's Spark (tests, demo): its JVMs run short jobs on small data on 2
#: cores, where C2's compiler threads took 30-45% of each JVM's CPU and G1's concurrent
#: threads compete with the other servers. C1 alone and the serial collector halved the CPU
#: of the warehouse tests (tests/integration/warehouse/test_apply.py: 283-411 -> 146-172
#: CPU seconds, 149-211 -> 80-97 s). Not for a long-lived production driver: C2's code is
#: faster once compiled, so benchmarks ask for ``quick_jvm=False``.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: SQL settings of the stack's Spark (tests, demo): its blocks are a few rows of tables of
#: many shapes, so Spark generated and compiled Java for nearly every query. A JFR profile
#: of the Connect server over two warehouse conformance tests had 36% of its CPU samples in
#: code generation (janino, the class lookups janino makes, the regex that strips comments
#: from the generated source before the cache lookup). Interpreted, six warehouse
#: conformance tests on the Connect server took 117 s / 102 CPU s against 138-140 s /
#: 126-131 CPU s. Results are the same either way (Spark tests both modes); a production
#: driver, whose blocks are thousands of rows of the same tables, keeps code generation,
#: and so do the benchmarks (``interpreted=False``).
INTERPRETED = {"spark.sql.codegen.wholeStage": "false",
               "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

#: Session settings of the stack's warehouse groups on its Connect server
#: (``SparkConnect.group_spark``) and of the tests reading their tables back: their blocks
#: are a few rows, so every Delta commit's fixed work dominates (the snapshot's state
#: rebuilt from the log, the MERGE's join, the UPDATE of the position), and each of those
#: runs one task per partition. The warehouse's own defaults
#: (``consumers.warehouse.session.DEFAULTS``: 8 shuffle partitions, 4 for a snapshot,
#: adaptive plans) suit blocks of 300,000 rows. Measured on the Connect server, warm, 12
#: blocks of 20 rows, alternated: a MERGE 0.94-1.15 s -> 0.75-0.89 s, the position's
#: UPDATE 0.63-0.82 s -> 0.53-0.66 s. Not in ``base_conf``: a local-mode driver (C1 only)
#: showed no difference (the warehouse's exactly-once test 54-58 s either way), and its
#: 2 partitions let a block's write use both cores. Results are the same either way.
SMALL_BLOCKS = {"spark.sql.shuffle.partitions": "1",
                "spark.databricks.delta.snapshotPartitions": "1",
                "spark.sql.adaptive.enabled": "false"}


def base_conf(warehouse: Path | None = None, *, quick_jvm: bool = True,
              interpreted: bool = True) -> dict[str, str]:
    """Spark settings of the local stack: Delta, the pre-fetched jars, 2 GiB, no UI, small
    shuffles, 127.0.0.1, Spark's log in ``.run/spark/spark.log``, :data:`QUICK_JVM` and
    :data:`INTERPRETED` unless asked not to."""
    svc = Spark()
    spark_dir = prepare_env()
    java_opts = (f"-Dlog4j.configurationFile={spark_dir / 'log4j2.properties'} "
                 f"-Dderby.system.home={spark_dir / 'derby'}")
    if quick_jvm:
        java_opts += " " + QUICK_JVM
    return {
        "spark.jars": ",".join(str(j) for j in svc.jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # A row of 64 MiB is staged as 85 MiB of base64 text: reading it back takes a few
        # copies of that in the driver (the CSV reader's char buffers, a String, UTF-8).
        "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.driver.bindAddress": HOST,
        "spark.driver.host": HOST,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.warehouse.dir": str(warehouse or spark_dir / "warehouse"),
        **(INTERPRETED if interpreted else {}),
    }


def warehouse_spark(master: str = "local[2]", *, quick_jvm: bool = True,
                    interpreted: bool = True, **extra: str) -> dict[str, object]:
    """The ``spark:`` section of a warehouse target on the local stack."""
    return {"master": master,
            "conf": {**base_conf(quick_jvm=quick_jvm, interpreted=interpreted), **extra}}


def session(app_name: str, warehouse: Path | None = None) -> SparkSession:
    """A local SparkSession with Delta, Kafka and Avro: 2 cores, 2 GiB, JDK 17, no UI.

    Spark's own log (level WARN) goes to ``.run/spark/spark.log``, not the console. End it
    with :func:`stop_session` to get the JVM back, not just ``spark.stop()``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).master("local[2]")
    for key, value in class_archive.use(base_conf(warehouse), "auto").items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def stop_session(spark: SparkSession, timeout: float = 30.0) -> None:
    """Stop ``spark`` and its JVM.

    ``spark.stop()`` alone keeps pyspark's gateway JVM (about 300 MB) alive until Python
    exits; the JVM quits when its stdin pipe closes. A later :func:`session` starts a new one.
    """
    from pyspark import SparkContext

    if SparkContext._gateway is None:  # already stopped: the session cannot reach a JVM
        return
    spark.stop()
    end_jvm(timeout)
