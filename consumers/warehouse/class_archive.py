"""Writes the Spark driver's class-data archive that ``stack/class_archive.py`` maps.

The archive holds the classes a warehouse driver loads, so it is written by a JVM that runs
a warehouse session (``session.acquire``: the same settings and jars) through a small Delta
workload with ``-XX:ArchiveClassesAtExit``. ``stack/class_archive.py`` starts this module as
a child process of its own (``python -m consumers.warehouse.class_archive ARCHIVE
CONF_JSON``) when a driver starts and finds no archive.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stack.class_archive import build_lock, failed_marker, prune, with_option
from stack.spark_jvm import end_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def build(conf: Mapping[str, str], path: Path) -> bool:
    """Write the archive for ``conf`` at ``path`` (a JVM run with a small Delta workload);
    True when it is there afterwards. Waits while another process builds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(path).open("a") as handle:  # closing it releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        return path.exists() or _build_locked(conf, path)


def _build_locked(conf: Mapping[str, str], path: Path) -> bool:
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    from consumers.warehouse import session as spark_sessions
    from consumers.warehouse.config import SparkSettings

    settings = SparkSettings(master="local[1]", app_name="tungsten-class-archive",
                             class_archive="off",
                             conf=with_option(conf, f"-XX:ArchiveClassesAtExit={partial} "
                                                   "-Xlog:cds=off -Xlog:cds+dynamic=off"))
    try:
        spark = spark_sessions.acquire(settings)
        with tempfile.TemporaryDirectory(prefix="class-archive-") as work:
            _workload(spark, Path(work))
            spark_sessions.release(spark)
        end_jvm(600)  # the JVM writes the archive as it exits
        if not partial.exists() or partial.stat().st_size == 0:
            raise RuntimeError(f"the JVM wrote no archive at {partial}")
        os.replace(partial, path)
        failed_marker(path).unlink(missing_ok=True)
        prune(path.parent)
        log.info("class-data archive written: %s (%d MB)", path, path.stat().st_size >> 20)
        return True
    except Exception as exc:
        log.exception("building the class-data archive %s failed", path)
        failed_marker(path).write_text(f"{type(exc).__name__}: {exc}\n")
        partial.unlink(missing_ok=True)
        return False


def _workload(spark: SparkSession, work: Path) -> None:
    """What a warehouse block does, in small: CSV staging read with a schema and casts,
    last change per key, a checkpoint, MERGE and append into Delta with a transaction id
    and commit metadata, history and reads back."""
    csv = work / "staged.csv"
    csv.write_text("I\x011\x010\x012026-01-01 00:00:00\x011\x01x\x01AAE=\x011.50\n"
                   "UI\x012\x010\x012026-01-01 00:00:01\x011\x01y\x01\x012.25\n"
                   "D\x013\x010\x012026-01-01 00:00:02\x012\x01\x01\x01\n")
    schema = ("op STRING, seqno BIGINT, rw INT, ts STRING, id STRING, v STRING, b STRING, "
              "d STRING")
    raw = spark.read.schema(schema).option("sep", "\x01").option("escape", '"').csv(
        csv.as_uri())
    raw.createOrReplaceTempView("staged")
    typed = spark.sql(
        "SELECT op, seqno, rw, CAST(ts AS TIMESTAMP) AS ts, CAST(id AS BIGINT) AS id, v, "
        "unbase64(b) AS b, CAST(d AS DECIMAL(38,10)) AS d FROM ("
        "SELECT *, row_number() OVER (PARTITION BY id ORDER BY seqno DESC, rw DESC) AS n "
        "FROM staged) WHERE n = 1").localCheckpoint(eager=True)
    typed.createOrReplaceTempView("src")
    table = (work / "t").as_uri()
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, v STRING, b BINARY, "
              "d DECIMAL(38,10), ts TIMESTAMP, _seqno BIGINT) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    conf = spark.conf
    conf.set("spark.databricks.delta.write.txnAppId", "tungsten.class-archive")
    conf.set("spark.databricks.delta.write.txnVersion", "3")
    conf.set("spark.databricks.delta.commitInfo.userMetadata", '{"low":1,"high":3}')
    spark.sql(f"MERGE INTO delta.`{table}` t USING src s ON t.id = s.id "
              "WHEN MATCHED AND s.op = 'D' AND t._seqno < s.seqno THEN DELETE "
              "WHEN MATCHED AND t._seqno < s.seqno THEN UPDATE SET v = s.v, b = s.b, "
              "d = s.d, ts = s.ts, _seqno = s.seqno "
              "WHEN NOT MATCHED AND s.op <> 'D' THEN INSERT (id, v, b, d, ts, _seqno) "
              "VALUES (s.id, s.v, s.b, s.d, s.ts, s.seqno)")
    for key in ("write.txnAppId", "write.txnVersion", "commitInfo.userMetadata"):
        conf.unset(f"spark.databricks.delta.{key}")
    spark.createDataFrame([(1, "x")], "seqno BIGINT, v STRING").write.format("delta").mode(
        "append").save((work / "position").as_uri())
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, table).history().select("version", "userMetadata").collect()
    spark.read.format("delta").load(table).collect()
    spark.read.format("delta").load((work / "position").as_uri()).agg({"seqno": "max"}).collect()


@click.command(context_settings={"help_option_names": ["-h", "--help"]},
               help="A class-data archive for the warehouse's Spark driver JVM: faster "
                    "restarts.\n\nARCHIVE: where to write it. CONF: JSON file of the "
                    "spark.* settings (deleted once read).")
@click.argument("archive", type=click.Path(path_type=Path))
@click.argument("conf", type=click.Path(path_type=Path))
def main(archive: Path, conf: Path) -> None:
    """``python -m consumers.warehouse.class_archive ARCHIVE CONF_JSON``: build one."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    settings = json.loads(conf.read_text())
    conf.unlink(missing_ok=True)
    sys.exit(0 if build(settings, archive) else 1)


if __name__ == "__main__":
    main()
