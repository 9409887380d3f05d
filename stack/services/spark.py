"""Spark local (in the client's process) with Delta Lake, Kafka and Avro data sources.

pyspark (from PyPI) bundles Spark itself; the Delta, spark-sql-kafka and spark-avro jars are
fetched once with Maven and passed as ``spark.jars``, instead of being resolved at every
session start. There is no server: "up" means the jars are in place and a JDK 17 is there
(Spark fails on newer JDKs).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyspark

from stack.errors import StackError
from stack.fetch import maven_runtime_jars
from stack.service import Service
from stack.settings import JAVA_HOME, cache_dir, service_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_VERSION = pyspark.__version__
DELTA_VERSION = "4.0.0"
COORDINATES = [
    f"io.delta:delta-spark_2.13:{DELTA_VERSION}",
    f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}",
    f"org.apache.spark:spark-avro_2.13:{SPARK_VERSION}",
]


def _artifact(jar: Path) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar.name)


class Spark(Service):
    """The Spark/Delta toolchain; sessions come from :func:`session`."""

    name = "spark"

    @property
    def port(self) -> None:
        return None

    def jars(self) -> list[Path]:
        """The extra jars, minus those pyspark already ships (duplicates break the classpath)."""
        fetched = maven_runtime_jars(self.name, COORDINATES,
                                     cache_dir(f"spark-{SPARK_VERSION}-jars"), log=self.log)
        bundled = {_artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
        return [j for j in fetched if _artifact(j) not in bundled]

    def install(self) -> None:
        if not (JAVA_HOME / "bin" / "java").exists():
            raise StackError(self.name, f"no JDK 17 at {JAVA_HOME} (set TREP_JAVA_HOME)")
        self.jars()

    def launch(self) -> None:
        """Nothing runs until a session is built."""

    def running(self) -> bool:
        return (cache_dir(f"spark-{SPARK_VERSION}-jars") / ".complete").exists()

    def ready(self) -> bool:
        return self.running() and (JAVA_HOME / "bin" / "java").exists()

    def stop(self) -> None:
        """Sessions stop with their process; nothing to do."""

    def version(self) -> str:
        return f"Spark {SPARK_VERSION} / Delta {DELTA_VERSION}"


def service() -> Spark:
    """The local Spark toolchain."""
    return Spark()


def session(app_name: str, warehouse: Path | None = None) -> SparkSession:
    """A local SparkSession with Delta, Kafka and Avro; small and quiet, JDK 17 pinned."""
    from pyspark.sql import SparkSession

    spark_dir = service_dir("spark")
    jars = Spark().jars()
    # The JVM is launched by pyspark from this process's environment.
    os.environ["JAVA_HOME"] = str(JAVA_HOME)
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
    builder = (
        SparkSession.builder.appName(app_name)
        .master("local[2]")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog",
                "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse or spark_dir / "warehouse"))
        .config("spark.driver.extraJavaOptions",
                f"-Dderby.system.home={spark_dir / 'derby'}")
        .config("spark.local.dir", str(spark_dir / "tmp"))
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
