"""A class-data archive for the warehouse's Spark driver JVM: faster restarts.

A warehouse group that restarts (a crash, a deploy, ``trepctl online`` after an error) pays
the driver JVM's start again: tens of thousands of Spark, Scala and Delta classes loaded,
parsed and verified, about half of the time to a ready SparkSession on a small machine. The
JVM can map those classes from an archive instead (JDK 13+ "dynamic CDS": written at the exit
of a JVM run with ``-XX:ArchiveClassesAtExit``, used with ``-XX:SharedArchiveFile``).

With ``spark.class_archive: auto`` (the default) a process that starts Spark and finds no
archive for its JVM, Spark and jars starts :func:`build` in the background, in a child
process of its own; from then on every driver start maps the archive. Nothing depends on
it: a JVM that cannot use an archive (another JDK, another classpath, a damaged file) warns
in Spark's output and loads its classes the usual way. A build that failed leaves
``<key>.failed`` (its log) beside where the archive would be, and is not tried again until
that file is removed.

The archives live in ``$TREP_CACHE_DIR/spark-class-archive`` (default
``~/.cache/tungsten-kafka``), one per key (about 180 MB each); a new one's build deletes
all but the two newest.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DRIVER_OPTIONS = "spark.driver.extraJavaOptions"


def archive_dir() -> Path:
    """Where archives are kept (``$TREP_CACHE_DIR/spark-class-archive``)."""
    base = os.environ.get("TREP_CACHE_DIR") or Path.home() / ".cache" / "tungsten-kafka"
    return Path(base) / "spark-class-archive"


def _java() -> Path | None:
    """The ``java`` that pyspark's launcher runs: ``$JAVA_HOME/bin/java``, else PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path(conf: Mapping[str, str]) -> Path | None:
    """The archive for this JVM, Spark installation and set of jars (None: no ``java``).

    The key only spares a useless archive: the JVM checks an archive against itself and its
    classpath anyway and ignores one that does not match.
    """
    import pyspark

    java = _java()
    if java is None:
        return None
    stat = java.stat()
    # The archive records the JVM's classpath: Spark's jars folder of this installation
    # (another virtualenv's copy of the same pyspark is another classpath).
    spark_home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    parts = [str(java), str(stat.st_size), str(int(stat.st_mtime)), pyspark.__version__,
             str(Path(spark_home).resolve()), *_jar_stamps(Path(spark_home) / "jars"),
             conf.get("spark.jars", ""), conf.get("spark.jars.packages", ""),
             conf.get("spark.driver.extraClassPath", "")]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return archive_dir() / f"spark-{pyspark.__version__}-{key}.jsa"


def _jar_stamps(jars: Path) -> list[str]:
    """Name, size and mtime of each jar: what the JVM checks an archive's classpath by.

    A virtualenv made again at the same path (a CI clone) has the same folder but new jar
    files, and the JVM ignores an archive built from the old ones."""
    if not jars.is_dir():
        return []
    stamps = []
    for jar in sorted(jars.glob("*.jar")):
        st = jar.stat()
        stamps.append(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}")
    return stamps


def with_option(conf: Mapping[str, str], option: str) -> dict[str, str]:
    """``conf`` with one more JVM option for the driver."""
    existing = conf.get(DRIVER_OPTIONS, "").strip()
    return {**conf, DRIVER_OPTIONS: f"{existing} {option}".strip()}


def use(conf: Mapping[str, str], setting: str) -> dict[str, str]:
    """``conf`` for a driver JVM about to start: mapping the archive where there is one;
    where there is none and ``setting`` is ``auto``, one is built in the background for the
    next start. ``off`` (or an archive option already in ``conf``) changes nothing."""
    options = conf.get(DRIVER_OPTIONS, "")
    if setting == "off" or "SharedArchiveFile" in options or "ArchiveClassesAtExit" in options:
        return dict(conf)
    path = archive_path(conf)
    if path is None:
        return dict(conf)
    if path.exists():
        return with_option(conf, f"-XX:SharedArchiveFile={path}")
    if not _failed(path).exists():
        _build_in_background(conf, path)
    return dict(conf)


def _failed(path: Path) -> Path:
    return path.with_suffix(".failed")


def _lock(path: Path) -> Path:
    return path.with_suffix(".lock")


def _being_built(path: Path) -> bool:
    """True while another process holds the archive's build lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path).open("a") as handle:  # closing it releases a lock taken here
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def _build_in_background(conf: Mapping[str, str], path: Path) -> None:
    """Start :func:`main` in its own session: it outlives this process if need be."""
    if _being_built(path):
        return
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".conf.json",
                                     delete=False) as spec:
        json.dump(dict(conf), spec)
    log.info("building the Spark driver's class-data archive %s in the background "
             "(later starts map it)", path)
    out: IO[bytes]
    with path.with_suffix(".log").open("ab") as out:
        subprocess.Popen([sys.executable, "-m", __name__, str(path), spec.name],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                         start_new_session=True, env=dict(os.environ))


def build(conf: Mapping[str, str], path: Path) -> bool:
    """Write the archive for ``conf`` at ``path`` (a JVM run with a small Delta workload);
    True when it is there afterwards. Waits while another process builds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path).open("a") as handle:  # closing it releases the lock
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
        spark_sessions.end_jvm(600)  # the JVM writes the archive as it exits
        if not partial.exists() or partial.stat().st_size == 0:
            raise RuntimeError(f"the JVM wrote no archive at {partial}")
        os.replace(partial, path)
        _failed(path).unlink(missing_ok=True)
        prune(path.parent)
        log.info("class-data archive written: %s (%d MB)", path, path.stat().st_size >> 20)
        return True
    except Exception as exc:
        log.exception("building the class-data archive %s failed", path)
        _failed(path).write_text(f"{type(exc).__name__}: {exc}\n")
        partial.unlink(missing_ok=True)
        return False


def prune(folder: Path, keep: int = 2) -> list[Path]:
    """Delete all but the ``keep`` newest archives (an upgrade leaves the old one behind);
    what was deleted. A JVM that maps a deleted archive keeps it until it exits."""
    archives = sorted(folder.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime,
                      reverse=True)
    for old in archives[keep:]:
        old.unlink(missing_ok=True)
        for suffix in (".lock", ".log", ".failed"):
            old.with_suffix(suffix).unlink(missing_ok=True)
    return archives[keep:]


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


def main(argv: list[str] | None = None) -> int:
    """``python -m consumers.warehouse.class_archive ARCHIVE CONF_JSON``: build one."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("archive", type=Path)
    parser.add_argument("conf", type=Path, help="JSON file of the spark.* settings "
                                                "(deleted once read)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    conf = json.loads(args.conf.read_text())
    args.conf.unlink(missing_ok=True)
    return 0 if build(conf, args.archive) else 1


if __name__ == "__main__":
    sys.exit(main())
