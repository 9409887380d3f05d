"""The Spark session of a warehouse applier.

One SparkContext per process: the first warehouse applier of a process that has none starts
it (``local[*]`` inside this process by default, or a cluster's master URL) and stops it when
the last one closes. Under ``spark-submit``, or in a process that already runs Spark (a test
session, a notebook), the existing context is used and left running. Each applier works in
its own ``newSession()``: Delta's transaction-id and commit-metadata settings are session
SQL settings, so two groups in one process never see each other's.

With ``spark.remote`` the applier is a Spark Connect client instead: no JVM in this
process. A group's Connect session id is derived from its name, so a restarted process takes
over the session its killed predecessor left on the server and interrupts what that one
still had running (``takeover``).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from consumers.warehouse.config import SparkSettings
from stack import class_archive
from stack.spark_jvm import end_jvm

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

#: Settings every warehouse session runs with (a group's ``spark.conf`` may override the
#: tuning ones; the correctness ones are forced: see ``FORCED``).
DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    # Each block's materialized source is dropped by Spark's cleaner once unreferenced; a
    # long-running replicator should not wait the default 30 minutes for that.
    "spark.cleaner.periodicGC.interval": "5min",
    "spark.sql.shuffle.partitions": "8",
    # Delta's default of 50 tasks to rebuild a table's state is far too many for the small
    # logs of per-table batches.
    "spark.databricks.delta.snapshotPartitions": "4",
    # The MERGE source is already materialized (localCheckpoint, so cast errors surface
    # before any table is written): Delta need not materialize it a second time.
    "spark.databricks.delta.merge.materializeSource": "none",
    # A block's source rows (up to 300,000 by default) are broadcast to the target scan
    # instead of shuffling the whole target table.
    "spark.sql.autoBroadcastJoinThreshold": "64m",
    # Spark keeps the classes it generated for a query's code in a cache keyed by their
    # source, 100 of them by default. One 300,000-row block of one table made about 40, so
    # a block of three tables (or the next block of the same one) evicted the classes it was
    # about to use again: every block compiled its code anew, and the JIT compiled the new
    # classes again. Measured (bench/warehouse_bench.py, 900,000 row changes, runs in one
    # driver, alternated): 117-146 compilations every run with 100; 98 in the first and 7
    # in each later one with more room, a warm run's JVM CPU 36.2-41.3 -> 26.7-32.4 s. A static
    # setting: it takes effect when this process starts Spark (``acquire``), a Spark
    # Connect server needs it in its own configuration.
    "spark.sql.codegen.cache.maxEntries": "1000",
}
#: Exactness depends on these: TIMESTAMP text is UTC, bad text fails instead of NULL.
FORCED = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "true",
    "spark.sql.caseSensitive": "false",
}

_lock = threading.Lock()
_owned: SparkSession | None = None
_users = 0


def _session_conf(settings: SparkSettings) -> dict[str, str]:
    """The SQL settings of every session of a group: tuning, the group's, then FORCED."""
    return {**{k: v for k, v in DEFAULTS.items()
               if k.startswith(("spark.sql", "spark.databricks"))},
            **{k: v for k, v in settings.conf.items()
               if k.startswith(("spark.sql.", "spark.databricks."))
               and not k.startswith(("spark.sql.extensions", "spark.sql.catalog.spark_catalog",
                                     "spark.sql.warehouse"))},
            **FORCED}


def _configure(spark: SparkSession, settings: SparkSettings) -> None:
    """Set the session's SQL settings. Static ones (fixed when the JVM's Spark started)
    cannot be set on a session: ``acquire`` passed them to the Spark it started; a
    group's own static setting that reaches a Spark started before (a Connect server,
    the Spark of a notebook or a test session) is reported, not silently dropped."""
    for key, value in _session_conf(settings).items():
        if spark.conf.isModifiable(key):
            spark.conf.set(key, value)
            continue
        started = spark.conf.get(key, None) if key in settings.conf else value
        if started != value:
            log.warning("spark.conf %s = %s is a static Spark setting: this session's Spark "
                        "was started with %s; set it where that Spark is started",
                        key, value, started)


@dataclass(frozen=True)
class Takeover:
    """What a remote session found left running by a previous process of its group."""

    session_id: str
    interrupted: tuple[str, ...]


#: The takeover of each remote session this process opened (by the session's id()).
takeovers: dict[int, Takeover] = {}


def is_remote(spark: SparkSession) -> bool:
    """A Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def checkpointed(spark: SparkSession, frame: DataFrame) -> DataFrame:
    """``frame.localCheckpoint(eager=True)``, the result bound to ``spark``, its session.

    PySpark's Connect client (4.0) binds the DataFrame a checkpoint returns to the thread's
    *active* session (``conversion.proto_to_remote_cached_dataframe``), not to the session
    that made it: the first session the thread opened, or the process's first one once
    that is stopped. With more than one session in a process (several groups, a session
    replaced after an error, trep-warehouse commands run one after another) the MERGE then
    names a DataFrame its session does not hold: "No DataFrame with id ... is found in the
    session". So the thread's active session is ``spark`` while the checkpoint is made.
    """
    if not is_remote(spark):
        return frame.localCheckpoint(eager=True)
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    holder = RemoteSession._active_session
    before = getattr(holder, "session", None)
    holder.session = spark
    try:
        return frame.localCheckpoint(eager=True)
    finally:
        holder.session = before


def keep_release_pool() -> None:
    """Closing one Spark Connect client must not break the others of this process.

    PySpark (4.0) sends its ReleaseExecute calls through one thread pool per process, and
    every client's ``close()`` shuts that pool down, ``SparkSession.__del__`` included, in
    whichever thread the garbage collector happens to run it. Run in one of the pool's own
    threads, the shutdown cannot join itself and leaves the pool shut down for good: every
    later query of every session of the process then fails with "cannot schedule new
    futures after shutdown" (a conformance group stopped on it after a restart dropped its
    old session). A replicator opens and drops sessions while others work, so the pool
    lives as long as the process; its idle threads end with it.
    """
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

    # Idempotent: every remote session sets the same no-op.
    setattr(ExecutePlanResponseReattachableIterator, "shutdown",  # noqa: B010
            classmethod(lambda cls: None))


def _remote(remote: str, settings: SparkSettings, owner: str | None) -> SparkSession:
    from pyspark.sql.connect.session import SparkSession as RemoteSession

    keep_release_pool()
    url = remote.rstrip("/")
    if owner is None:
        session_id = str(uuid.uuid4())
        spark = RemoteSession.builder.remote(f"{url}/;session_id={session_id}").create()
        interrupted: tuple[str, ...] = ()
    else:
        # The group's own session, kept open on the server across its processes (a closed
        # session id cannot be used again): a killed predecessor's MERGE may still run in
        # it. Stop that, so it does not commit beside this process's replay of the block.
        session_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"tungsten:{owner}"))
        spark = RemoteSession.builder.remote(f"{url}/;session_id={session_id}").create()
        spark.release_session_on_close = False
        try:
            interrupted = tuple(spark.interruptAll())
        except Exception as exc:
            if "SESSION_CLOSED" not in str(exc):
                raise
            # Idle past the server's session timeout: nothing of it runs any more.
            log.info("%s: its Spark Connect session timed out on the server; opening a "
                     "new one", owner)
            session_id = str(uuid.uuid4())
            spark = RemoteSession.builder.remote(f"{url}/;session_id={session_id}").create()
            interrupted = ()
    if interrupted:
        log.warning("%s: interrupted %d operation(s) a previous process of this group left "
                    "running on the Spark Connect server", owner, len(interrupted))
    takeovers[id(spark)] = Takeover(session_id, interrupted)
    _configure(spark, settings)  # type: ignore[arg-type]
    return spark  # type: ignore[return-value]


def acquire(settings: SparkSettings, owner: str | None = None) -> SparkSession:
    """A new session on this process's Spark (started here if there is none), or on the
    Spark Connect server of ``settings.remote``; ``owner`` (a group) names a remote session
    so that the group's next process takes it over."""
    global _owned, _users
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if settings.remote is not None:
        return _remote(settings.remote, settings, owner)
    with _lock:
        if SparkContext._active_spark_context is None:
            # Under spark-submit the driver's gateway already carries the submitted master
            # and jars: they win over the group's settings.
            submitted = "PYSPARK_GATEWAY_PORT" in os.environ
            builder = SparkSession.builder.appName(settings.app_name)
            if not submitted:
                builder = builder.master(settings.master)
            conf = {**DEFAULTS, **settings.conf}
            extensions = conf.get("spark.sql.extensions", "")
            if DELTA_EXTENSION not in extensions:
                conf["spark.sql.extensions"] = ",".join(
                    e for e in (extensions, DELTA_EXTENSION) if e)
            conf.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
            if not submitted:  # spark-submit started the driver JVM already
                conf = class_archive.use(conf, settings.class_archive)
            for key, value in conf.items():
                builder = builder.config(key, value)
            if not submitted and "spark.jars" not in conf and "spark.jars.packages" not in conf:
                from delta import configure_spark_with_delta_pip

                builder = configure_spark_with_delta_pip(builder)
            log.info("starting Spark (master %s)",
                     "from spark-submit" if submitted else settings.master)
            base = builder.getOrCreate()
            _owned = base
            _users = 0
        else:
            base = SparkSession.builder.getOrCreate()
        if base is _owned:
            _users += 1
        spark = base.newSession()
        _configure(spark, settings)
        return spark


def release(spark: SparkSession) -> None:
    """This applier is done with its session; the last user of a Spark this module started
    stops it (and its JVM's work: executors on a cluster are released)."""
    global _owned, _users
    if is_remote(spark):
        takeovers.pop(id(spark), None)
        spark.stop()  # best effort, never raises
        return
    with _lock:
        if _owned is None:
            return
        try:
            same = spark.sparkContext is _owned.sparkContext
        except Exception:  # a dead gateway: nothing to compare, nothing to keep
            same = True
        if not same:
            return
        _users -= 1
        if _users > 0:
            return
        owned, _owned = _owned, None
    try:
        owned.stop()
    except Exception as exc:  # stopping must not raise (close() never raises)
        log.debug("stopping Spark: %s", exc)


def forget_dead_jvm() -> None:
    """After the JVM died (killed, out of memory): drop pyspark's handles on it, so the next
    ``acquire`` starts a new one instead of calling the dead one forever."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        try:
            gateway.jvm.java.lang.System.currentTimeMillis()
            return  # the JVM answers: only the session was stopped
        except Exception as exc:  # py4j's network errors: the JVM is gone or hung
            log.warning("Spark's JVM does not answer (%s); starting a new one", exc)
    SparkContext._active_spark_context = None
    end_jvm(timeout=10.0)


def alive(spark: SparkSession) -> bool:
    """True while the session's JVM and SparkContext (or Connect server) answer."""
    if is_remote(spark):
        try:
            spark.conf.get("spark.sql.session.timeZone")
            return not spark.is_stopped  # type: ignore[attr-defined]
        except Exception:
            return False
    try:
        sc = spark.sparkContext
        return sc._jsc is not None and not sc._jsc.sc().isStopped()
    except Exception:
        return False
