"""bench-compare's apply runs: this project's SQL applier into the MariaDB target and into
PostgreSQL, each from an empty target and an already filled THL, beside native MariaDB
replication's SQL thread on the same binlog.

Every run ends with the target equal to the source (a digest of all rows), or the benchmark
stops. CPU counts the applier and the target server it keeps busy.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pymysql
import sqlalchemy as sa
from compare_workload import RUN, SOURCE, Workload, mariadb_digest, pg_digest, query
from group_timing import POLL_S, time_group
from kazoo.client import KazooClient
from processes import CLK_TCK, cpu_seconds
from service import connect_mysql

from replicator.control import ComponentNodes, request
from replicator.tracking import CommitSeqnoTable
from replicator.zk import connect
from stack import settings
from stack.services.mariadb import MariaDB
from stack.settings import HOST
from trep.config import ServiceConfig


class Replica(MariaDB):
    """A bench-only MariaDB that replicates the source natively (never used by tests)."""

    def __init__(self) -> None:
        super().__init__("mariadb-replica", server_id=3, binlog=False)


#: A target server counts as quiet below this share of one core, measured over QUIET_WINDOW_S.
QUIET_SHARE = 0.05
QUIET_WINDOW_S = 0.5
#: The whole machine counts as quiet below this many cores busy over QUIET_WINDOW_S (the
#: stack's idle servers, ZooKeeper and Kafka among them, use 0-0.1 of a core here).
MACHINE_QUIET_CORES = 0.15
#: Seconds to wait for quiet servers at most before a run is timed anyway.
QUIET_LIMIT_S = 30.0


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent busy (all cores, ``/proc/stat``)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK  # less idle and iowait


def quiet_servers() -> float:
    """Wait until the target servers, and the machine as a whole, are idle; the seconds
    waited.

    One run's leftovers would otherwise be charged to the next run, which shares this
    machine's two cores with them: InnoDB flushing and purging the rows it wrote (the
    native replica's too), PostgreSQL's autovacuum, a dropped schema's files, Kafka
    compacting the THL, a Kafka Connect JVM on its way out. Both sides of a comparison
    wait alike."""
    pids = [target_pid("mariadb"), target_pid("postgresql")]
    started = time.monotonic()
    while time.monotonic() - started < QUIET_LIMIT_S:
        before, machine = sum(tree_cpu(p) for p in pids), machine_busy_seconds()
        time.sleep(QUIET_WINDOW_S)
        servers = sum(tree_cpu(p) for p in pids) - before
        if servers < QUIET_SHARE * QUIET_WINDOW_S and \
                machine_busy_seconds() - machine < MACHINE_QUIET_CORES * QUIET_WINDOW_S:
            break
    return round(time.monotonic() - started, 1)


def server_pid(server: MariaDB) -> int:
    """The mariadbd process id of a stack server."""
    return int(server.pid_file.read_text().split()[0])


def slave_status(port: int) -> dict[str, Any]:
    with connect_mysql(port, autocommit=True) as conn, \
            conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW SLAVE STATUS")
        return cur.fetchone() or {}


def run_native(replica: Replica, work: Workload, timeout: float) -> dict[str, Any]:
    """The replica fetches the workload's relay log, then its SQL thread alone is timed."""
    port = replica.port
    src = settings.port(SOURCE)
    for stmt in ("STOP SLAVE", "RESET SLAVE ALL", f"DROP DATABASE IF EXISTS {work.schema}",
                 f"CHANGE MASTER TO MASTER_HOST='{HOST}', MASTER_PORT={src}, "
                 f"MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=no, "
                 f"MASTER_LOG_FILE='{work.start[0]}', MASTER_LOG_POS={work.start[1]}",
                 "START SLAVE IO_THREAD"):
        query(port, stmt)
    deadline = time.monotonic() + timeout
    while True:
        st = slave_status(port)
        if st.get("Last_IO_Errno"):
            raise SystemExit(f"replica IO thread: {st.get('Last_IO_Error')}")
        if (st.get("Master_Log_File"), int(st.get("Read_Master_Log_Pos") or 0)) >= work.end:
            break
        if time.monotonic() > deadline:
            raise SystemExit("the replica did not fetch the relay log in time")
        time.sleep(0.1)
    pid = server_pid(replica)
    settled = quiet_servers()
    cpu0 = cpu_seconds(pid, children=True)
    started = time.monotonic()
    query(port, f"START SLAVE SQL_THREAD UNTIL MASTER_LOG_FILE='{work.end[0]}', "
                f"MASTER_LOG_POS={work.end[1]}")
    while True:
        st = slave_status(port)
        if st.get("Last_SQL_Errno"):
            raise SystemExit(f"replica SQL thread: {st.get('Last_SQL_Error')}")
        done = (st.get("Relay_Master_Log_File"), int(st.get("Exec_Master_Log_Pos") or 0))
        if done >= work.end:
            break
        if time.monotonic() > deadline:
            raise SystemExit("the replica's SQL thread did not finish in time")
        time.sleep(POLL_S)
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(pid, children=True) - cpu0
    query(port, "STOP SLAVE")
    if mariadb_digest(port, work.schema) != mariadb_digest(src, work.schema):
        raise SystemExit("the native replica differs from the source")
    return {"applier": "mariadb-native-sql-thread", "wall_seconds": round(elapsed, 3),
            "rows_per_second": round(work.rows / elapsed),
            "cpu_seconds_per_million_rows": round(cpu / work.rows * 1e6, 1),
            "settle_seconds": settled}


def applied(engine: sa.Engine, cfg: ServiceConfig) -> int:
    table = CommitSeqnoTable(cfg.tracking_schema).table
    try:
        with engine.connect() as conn:
            value = conn.execute(sa.select(table.c.seqno).where(table.c.task_id == 0)).scalar()
    except sa.exc.DBAPIError:
        return -1
    return -1 if value is None else int(value)


def apply_groups(schema: str) -> dict[str, Any]:
    """The consumer groups measured: MariaDB with the default block (200 events) and with 10,
    and from ``trepctl online`` on a running process; PostgreSQL from process start and from
    ``trepctl online``."""
    mariadb = {"type": "sql", "url": f"mysql+pymysql://root@{HOST}:"
                                     f"{settings.port('mariadb-target')}/"}
    postgresql = {"type": "sql", "url": f"postgresql+psycopg://postgres@{HOST}:"
                                        f"{settings.port('postgresql')}/postgres"}
    return {"consumers": {
        "mariadb": {"target": mariadb},
        "mariadb_b10": {"target": mariadb, "block_commit_events": 10},
        # Started OFFLINE and timed from the request for ONLINE, as the native SQL thread
        # is from START SLAVE SQL_THREAD on a running server (``run_apply``).
        "mariadb_online": {"target": mariadb, "auto_online": False},
        "postgresql": {"target": postgresql},
        "postgresql_online": {"target": postgresql, "auto_online": False},
    }}


def reset_target(cfg: ServiceConfig, group: str, schema: str) -> sa.Engine:
    target = cfg.consumers[group].target
    url = target.engine_url()  # type: ignore[union-attr]
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    with engine.begin() as conn:
        tracking.create(conn)
        conn.execute(sa.delete(tracking.table))
        _drop_schema(conn, schema)
    return engine


def _drop_schema(conn: sa.Connection, name: str) -> None:
    conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'
                         if conn.dialect.name == "postgresql"
                         else f"DROP DATABASE IF EXISTS {name}"))


def drop_targets(cfg: ServiceConfig, schema: str) -> None:
    """The workload's schema and the service's tracking schema on every group's target,
    once the runs are over."""
    urls = {cfg.consumers[g].target.engine_url()  # type: ignore[union-attr]
            for g in cfg.consumers}
    for url in urls:
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            with engine.begin() as conn:
                for name in (schema, cfg.tracking_schema):
                    _drop_schema(conn, name)
        finally:
            engine.dispose()


def target_pid(group: str) -> int | None:
    if group.startswith("mariadb"):
        return server_pid(MariaDB("mariadb-target", 2, False))
    with contextlib.suppress(OSError, ValueError):
        pidfile = settings.RUN_DIR / "postgresql" / "data" / "postmaster.pid"
        return int(pidfile.read_text().split()[0])
    return None


def tree_cpu(pid: int | None) -> float:
    """CPU seconds of a process and its live children (PostgreSQL's backends)."""
    if pid is None:
        return 0.0
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(p, children=True)
    return total


def same_as_source(group: str, work: Workload) -> None:
    """Stop the benchmark unless the group's target holds exactly the source's rows."""
    src = mariadb_digest(settings.port(SOURCE), work.schema)
    got = (mariadb_digest(settings.port("mariadb-target"), work.schema)
           if group.startswith("mariadb") else pg_digest(settings.port("postgresql"), work.schema))
    if got != src:
        raise SystemExit(f"{group}: the target differs from the source ({got[0]} rows vs "
                         f"{src[0]})")


def _nodes(zk: KazooClient, cfg: ServiceConfig, group: str) -> ComponentNodes:
    return ComponentNodes(zk, cfg.zookeeper.root, cfg.service, f"consumers/{group}")


def _online(zk: KazooClient, cfg: ServiceConfig, group: str) -> bool:
    """Ask ``group`` (started OFFLINE) for ONLINE, as trepctl online does, once its
    process leads the group (False until then). The status node outlives the processes
    of earlier runs; the ephemeral ``alive`` node does not."""
    nodes = _nodes(zk, cfg, group)
    if not nodes.alive():
        return False
    status = nodes.status()
    if status is None or not str(status.get("state", "")).startswith("OFFLINE"):
        return False
    request(nodes, lambda d: setattr(d, "state", "ONLINE"))
    return True


def run_apply(cfg: ServiceConfig, path: Path, group: str, work: Workload, tail: int,
              timeout: float) -> dict[str, Any]:
    """One consumer group alone, from an empty target to the THL tail, timed."""
    engine = reset_target(cfg, group, work.schema)
    server = target_pid(group)
    settled = quiet_servers()
    server_cpu0 = tree_cpu(server)
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s) \
        if not cfg.consumers[group].auto_online else None
    if zk is not None:
        # The desired state outlives the process: the run before asked for ONLINE.
        request(_nodes(zk, cfg, group), lambda d: setattr(d, "state", "OFFLINE"))
    try:
        run = time_group(path, RUN / f"{cfg.service}-{group}.log", group,
                         lambda: applied(engine, cfg), tail, timeout, cpu_children=True,
                         online=None if zk is None else lambda: _online(zk, cfg, group))
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
    server_cpu = tree_cpu(server) - server_cpu0
    engine.dispose()
    same_as_source(group, work)
    cpu = run.cpu
    result: dict[str, Any] = {
        "applier": f"tungsten-kafka-{group}", "wall_seconds": round(run.seconds, 2),
        "rows_per_second": round(work.rows / run.seconds), "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_million_rows": round((cpu + server_cpu) / work.rows * 1e6, 1),
        "applier_cpu_share": round(cpu / (cpu + server_cpu), 2) if cpu + server_cpu else None,
        "settle_seconds": settled}
    figures = run.figures(work.rows, tail)
    steady = figures.get("steady_rows_per_second")
    if steady is not None and run.first is not None and tail > run.first.seqno:
        result["steady_rows_per_second"] = steady
        # Process start to the first stored position: what separates the two rates.
        result["startup_seconds"] = figures.get("startup_seconds")
        result["first_commit_seqno"] = run.first.seqno
        # Like the native SQL thread's figure, without the process's start (imports, Kafka,
        # the handshake): the group's CPU after its first commit, plus the target server's
        # (idle before the first block).
        steady_rows = work.rows * (tail - run.first.seqno) / (tail + 1)
        result["steady_cpu_seconds_per_million_rows"] = round(
            (cpu - run.first.cpu + server_cpu) / steady_rows * 1e6, 1)
    return result
