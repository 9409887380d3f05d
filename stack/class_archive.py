"""A class-data archive for the warehouse's Spark driver JVM: faster restarts.

A warehouse group that restarts (a crash, a deploy, ``trepctl online`` after an error) pays
the driver JVM's start again: tens of thousands of Spark, Scala and Delta classes loaded,
parsed and verified, about half of the time to a ready SparkSession on a small machine. The
JVM can map those classes from an archive instead (JDK 13+ "dynamic CDS": written at the exit
of a JVM run with ``-XX:ArchiveClassesAtExit``, used with ``-XX:SharedArchiveFile``).

With ``spark.class_archive: auto`` (the default) a process that starts Spark and finds no
archive for its JVM, Spark and jars starts a build (:data:`BUILDER`) in the background, in
a child process of its own; from then on every driver start maps the archive. Nothing depends on
it: a JVM that cannot use an archive (another JDK, another classpath, a damaged file) warns
in Spark's output and loads its classes the usual way. A build that failed leaves
``<key>.failed`` (its log) beside where the archive would be, and is not tried again until
that file is removed.

Mapping an archive is a matter of the driver JVM's options, so it lives here, where the
local stack's Spark sessions use it too (stack/ imports no consumer); writing one takes a
warehouse session, so the build is the warehouse's own program, run by name.

The archives live in ``$TREP_CACHE_DIR/spark-class-archive`` (default
``~/.cache/tungsten-kafka``), one per key (about 180 MB each); a new one's build deletes
all but the two newest.
"""

from __future__ import annotations

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
from typing import IO

log = logging.getLogger(__name__)

DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
#: ``python -m BUILDER ARCHIVE CONF_JSON`` writes an archive: a JVM run with a warehouse
#: session and a small Delta workload. Named, not imported: stack/ imports no consumer.
BUILDER = "consumers.warehouse.class_archive"


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
    if not failed_marker(path).exists():
        _build_in_background(conf, path)
    return dict(conf)


def failed_marker(path: Path) -> Path:
    """Beside the archive: the log of a build that failed (no build is tried while it is
    there)."""
    return path.with_suffix(".failed")


def build_lock(path: Path) -> Path:
    """Beside the archive: the file whose lock a build holds."""
    return path.with_suffix(".lock")


def _being_built(path: Path) -> bool:
    """True while another process holds the archive's build lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with build_lock(path).open("a") as handle:  # closing it releases a lock taken here
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def _build_in_background(conf: Mapping[str, str], path: Path) -> None:
    """Start :data:`BUILDER` in its own session: it outlives this process if need be."""
    if _being_built(path):
        return
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".conf.json",
                                     delete=False) as spec:
        json.dump(dict(conf), spec)
    log.info("building the Spark driver's class-data archive %s in the background "
             "(later starts map it)", path)
    out: IO[bytes]
    with path.with_suffix(".log").open("ab") as out:
        subprocess.Popen([sys.executable, "-m", BUILDER, str(path), spec.name],
                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                         start_new_session=True, env=dict(os.environ))


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
