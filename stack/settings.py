"""Where the local stack keeps its files and which ports it listens on.

Every value can be overridden from the environment, so two checkouts (or a CI run next to a
developer's stack) can live side by side on one machine.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Data directories, logs and pid files of every server: one folder, removed by ``make clean``.
RUN_DIR = Path(os.environ.get("TREP_RUN_DIR", REPO_ROOT / ".run")).resolve()

#: Downloads (jars, zips, Go modules). Kept outside the checkout by default so that a fresh
#: clone on the same machine (CI) downloads nothing a second time.
CACHE_DIR = Path(
    os.environ.get("TREP_CACHE_DIR", Path.home() / ".cache" / "tungsten-kafka")
).resolve()

#: Every server binds here, never ``localhost``: IPv6/IPv4 mismatches bite the JVM servers.
HOST = "127.0.0.1"

#: JDK used by Kafka, ZooKeeper, Elasticsearch and Spark. Spark fails on newer JDKs.
JAVA_HOME = Path(os.environ.get("TREP_JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64"))

#: The JIT of the stack's lighter servers (ZooKeeper, Kafka, Elasticsearch, Apicurio): they
#: live for one test run or demo on 2 cores, and over a 9-minute part of the suite C2's
#: compiler thread took 24% of Kafka's CPU, 38% of Elasticsearch's, 44% of Apicurio's
#: (per-thread CPU, /proc). C1 alone compiles once, cheaply. Not for a production server,
#: whose C2 code pays back over days. The Spark Connect server keeps C2 (its MERGEs are
#: CPU-bound: spark_connect.py).
C1_ONLY = "-XX:TieredStopAtLevel=1"

MAVEN_REPO_URL = os.environ.get("TREP_MAVEN_URL", "https://repo1.maven.org/maven2")

_DEFAULT_PORTS = {
    "mariadb-source": 13306,
    "mariadb-target": 13307,
    "postgresql": 15432,
    "zookeeper": 12181,
    "kafka": 19092,
    "kafka-controller": 19093,
    "elasticsearch": 19200,
    "elasticsearch-transport": 19300,
    "ferretdb": 37017,
    "apicurio": 18081,
    # Spark Connect's gRPC (a long-lived Spark the warehouse groups of the tests share).
    "spark-connect": 15002,
    # The operator console (trep-console) make demo starts.
    "console": 18090,
    # Benchmark-only (make bench-compare): a native replica of the source, Kafka Connect's REST.
    "mariadb-replica": 13308,
    # ... and a source of its own, whose binlog it resets (the demo's and the tests' source
    # keeps its binlog, so their services keep valid positions).
    "mariadb-bench-source": 13309,
    "debezium-rest": 18083,
    # Test-only, started by the few tests that stop or purge a server under a running
    # service (source down, binlogs purged, Kafka down, ZooKeeper down): on their own servers
    # those tests run beside the rest of the suite instead of holding every test back.
    "mariadb-scratch": 13310,
    "kafka-scratch": 19095,
    "kafka-scratch-controller": 19096,
    "zookeeper-scratch": 12182,
}


def port(name: str) -> int:
    """Port of a service: ``TREP_<NAME>_PORT`` from the environment, else the default."""
    env = "TREP_" + name.upper().replace("-", "_") + "_PORT"
    return int(os.environ.get(env, _DEFAULT_PORTS[name]))


def service_dir(name: str) -> Path:
    """The run directory of one service (data, config, log, pid file)."""
    path = RUN_DIR / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir(*parts: str) -> Path:
    """A sub-folder of the download cache, created on demand."""
    path = CACHE_DIR.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
