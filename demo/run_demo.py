"""The README's demo: live replication from the source MariaDB to every target of demo.yml.

Run by ``make demo`` after the stack is up. It

1. sets every consumer group OFFLINE (``trepctl offline``) and starts one ``trep-run``
   process (``python -m trep.runner -c demo/demo.yml``): the extractor and the groups
   ``mariadb``, ``postgresql``, ``elasticsearch``, ``changes``, ``mongodb`` and
   ``warehouse`` (Spark/Delta);
2. commits a marker on the source and waits until the THL holds it, so whatever reached the
   binlog since the last run is in the THL before the demo tables are rebuilt;
3. puts ``mariadb`` ONLINE from its stored position (it applies that backlog, then the
   rebuild's DDL); drops the PostgreSQL demo schema (that target skips DDL: the applier makes
   the schema and tables again from the THL's row changes) and puts ``postgresql`` ONLINE
   with ``--from-seqno`` after the marker, as one re-provisions a target; ``mongodb`` the
   same way, its demo collections dropped first, and ``warehouse``, its Delta tables emptied;
4. drops and recreates the demo tables on the source, then commits a few hundred
   transactions of inserts, updates and deletes over two tables, one without a primary key,
   with unicode, NULLs, decimals and binary, while the runner replicates;
5. shows ``thl list -last 3`` and ``trepctl status``, waits with
   ``trepctl wait -applied <THL tail>``, prints ``thl info``;
6. compares every demo table on the source and every target (row count, and a SHA-256 over
   the rows normalised to text and sorted), prints the table and exits 1 if anything
   differs;
7. stops the runner with SIGTERM.

Run it again: the THL topic and the positions persist; ``mariadb`` resumes where it stopped
and the tables converge again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import click
import pymysql
import sqlalchemy as sa
import yaml
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError

from consumers.errors import ConsumerError
from consumers.registry import ApplierContext, build_applier
from demo.compare import digest, report
from demo.tables import RENAME_EMAIL, SCHEMA, TABLES
from demo.targets import demo_target
from replicator.control import ComponentNodes
from replicator.state import State
from replicator.tracking import CommitSeqnoTable
from replicator.zk import connect
from stack.services.spark import warehouse_spark
from stack.settings import RUN_DIR, port
from thl_topics.errors import ThlTopicMissing
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig, load_config

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: demo/demo.yml names the stack's default ports; the demo runs on a copy with the ports
#: the stack really uses (TREP_<SERVICE>_PORT), so two stacks can live side by side.
TEMPLATE = HERE / "demo.yml"
CONFIG = RUN_DIR / "demo.yml"
DEFAULT_PORTS = {"mariadb-source": 13306, "mariadb-target": 13307, "postgresql": 15432,
                 "zookeeper": 12181, "kafka": 19092, "elasticsearch": 19200, "ferretdb": 37017,
                 "apicurio": 18081}
PY = sys.executable
SOURCE_PORT = port("mariadb-source")
TARGET_PORT = port("mariadb-target")


NAMES = ("Ada Lovelace", "Grace Hopper", "Zoë Šimůnková", "Łukasz Żółć", "東京 太郎",
         "Ολυμπία Παπαδοπούλου", "Renée 😀", "O'Brien", "back\\slash", "Ñandú Añejo",
         "Søren Kierkegård", "Дмитрий", "  padded  ")
NOTES = ("signup", "price changed: 9,99 € → 12,50 €", "ünïcødé ✓", "quote ' and \" both",
         "line\nbreak", "tab\there", "", "emoji 🚀🚀")
EPOCH = dt.datetime(2024, 1, 1)  # noqa: DTZ001 - DATETIME columns are naive on purpose


# -- helpers for the three servers -------------------------------------------------------------

def mysql(port: int) -> pymysql.connections.Connection[Any]:
    """A connection to the source or the MariaDB target (utf8mb4, explicit commits)."""
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="",
                           charset="utf8mb4", autocommit=False)


def run_cli(module: str, *args: str) -> int:
    """Run one of the replicator's commands against the demo service, output shown as is."""
    return subprocess.call([PY, "-m", module, "-c", str(CONFIG), *args], cwd=ROOT)


def thl_tail(cfg: ServiceConfig) -> ThlEvent | None:
    """The last event of the THL (None: no topic yet, or an empty one)."""
    try:
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            rec = reader.tail()
    except ThlTopicMissing:
        return None
    return rec.event if rec is not None else None


# -- setup ---------------------------------------------------------------------------------

def thl_event_at(cfg: ServiceConfig, seqno: int, fragno: int) -> ThlEvent | None:
    """The THL's fragment ``fragno`` of ``seqno``, None if the THL does not hold it."""
    try:
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            offset = reader.offset_of(seqno, fragno)
            for rec in reader.records(offset):
                return rec.event if (rec.seqno, rec.fragno) == (seqno, fragno) else None
    except ThlTopicMissing:
        return None
    return None


def resumable(cfg: ServiceConfig, group: str) -> int | None:
    """The group's stored seqno if the THL holds that event (the handshake will accept it).

    None for a new target (no position while the THL holds earlier runs' history) or a
    position from another THL (the topic was recreated): such a group is started after the
    marker with ``--from-seqno`` instead. The position is read the way the group reads it:
    through its own applier.
    """
    applier = build_applier(cfg.consumers[group].target, ApplierContext(cfg, group))
    try:
        applier.connect()
        stored = applier.position()
    except ConsumerError:
        return None
    finally:
        applier.close()
    if stored is None:
        return None
    there = thl_event_at(cfg, stored.seqno, stored.fragno)
    if there is None or (there.epoch, there.event_id) != (stored.epoch, stored.event_id):
        return None
    return stored.seqno


def purged_binlog(cfg: ServiceConfig) -> str | None:
    """The binlog file the extractor would resume in, if the source no longer has it."""
    tail = thl_tail(cfg)
    if tail is None:
        return None
    file = tail.event_id.split(":", 1)[0]
    conn = mysql(SOURCE_PORT)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            present = {row[0] for row in cur.fetchall()}
    finally:
        conn.close()
    return None if file in present else file


def restart_extraction(cfg: ServiceConfig) -> None:
    """Delete the THL topic and the extractor's positions: it starts at the binlog's end.

    The extractor resumes from the THL tail, then the source's ``trep_commit_seqno``, then
    ZooKeeper; with all three gone it starts a new THL at seqno 0. The targets' positions
    then name no event of the new THL, and ``start_groups`` starts them after the marker.
    """
    admin = AdminClient(cfg.kafka.client())
    admin.delete_topics([cfg.thl_topic], operation_timeout=30)[cfg.thl_topic].result(60)
    deadline = time.monotonic() + 60
    # Deletion is asynchronous: the extractor could not recreate a topic still being deleted.
    while cfg.thl_topic in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise SystemExit(f"THL topic {cfg.thl_topic} is still there after 60 s")
        time.sleep(0.5)
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{SOURCE_PORT}/")
    try:
        with engine.begin() as conn:
            tracking = CommitSeqnoTable(cfg.tracking_schema)
            tracking.create(conn)
            conn.execute(sa.delete(tracking.table))
    finally:
        engine.dispose()
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s)
    try:
        zk.delete(f"{cfg.zookeeper.root.rstrip('/')}/{cfg.service}/extractor/position")
    except NoNodeError:
        pass
    finally:
        zk.stop()
        zk.close()


def prepare_mariadb_target() -> None:
    """Make sure ``demo_shop`` exists on the MariaDB target; its tables come through the THL.

    MariaDB logs ``CREATE DATABASE IF NOT EXISTS demo_shop`` with ``demo_shop`` as the
    statement's default schema, and the SQL applier runs ``USE <default schema>`` first, so
    on a target without the database the group would stop ("default schema demo_shop ... does
    not exist").
    """
    conn = mysql(TARGET_PORT)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {SCHEMA} DEFAULT CHARACTER SET utf8mb4")
        conn.commit()
    finally:
        conn.close()


def wait_extractor_online(cfg: ServiceConfig, runner: subprocess.Popen[bytes],
                          since: float, log: Path) -> None:
    """Until this runner's extractor is ONLINE, i.e. its binlog start position is fixed.

    With no THL yet it starts at the binlog's current end, so the marker must come after
    this. ``stateSince`` tells our extractor from a status left by an earlier process.
    """
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s)
    try:
        nodes = ComponentNodes(zk, cfg.zookeeper.root, cfg.service, "extractor")
        deadline = time.monotonic() + 90
        while True:
            status = nodes.status() or {}
            fresh = float(status.get("stateSince", 0)) >= since
            if status.get("state") == State.ONLINE.value and fresh:
                return
            if fresh and status.get("state") == State.ERROR.value:
                raise SystemExit(f"the extractor stopped: {_pending_error(status)}; see {log}")
            if runner.poll() is not None:
                raise SystemExit(f"the runner exited with code {runner.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the extractor did not go ONLINE within 90 s (state "
                                 f"{status.get('state', 'unknown')}: {_pending_error(status)})"
                                 f"; see {log}")
            time.sleep(0.2)
    finally:
        zk.stop()
        zk.close()


def _pending_error(status: dict[str, object]) -> str:
    """What the extractor's status says stopped it (a position the binlog no longer has,
    a refused login ...), or that it says nothing."""
    message = str(status.get("pendingExceptionMessage") or "NONE")
    return "no error reported" if message == "NONE" else message


def source_gtid(*statements: str) -> str:
    """Run statements on the source in one transaction; the GTID it was logged under."""
    conn = mysql(SOURCE_PORT)
    try:
        with conn.cursor() as cur:
            for stmt in statements:
                cur.execute(stmt)
            conn.commit()
            cur.execute("SELECT @@last_gtid")
            row = cur.fetchone()
    finally:
        conn.close()
    if row is None or not row[0]:
        raise SystemExit("the source reports no GTID")
    return str(row[0])


def mark_source(cfg: ServiceConfig, runner: subprocess.Popen[bytes], log: Path) -> int:
    """Commit a marker on the source; its seqno once the THL holds it.

    The extractor resumes at the binlog position of the THL tail, so a change made to
    ``demo_shop`` while the demo was not running is extracted now, before the marker.
    """
    marker = source_gtid(f"CREATE DATABASE IF NOT EXISTS {SCHEMA} DEFAULT CHARACTER SET utf8mb4")
    return wait_thl_holds(cfg, marker, runner, log).seqno


def start_groups(cfg: ServiceConfig, marker: int) -> None:
    """Put each consumer group ONLINE: from its stored position, or right after the marker.

    A group whose target does not replay statements (PostgreSQL, the document stores)
    never sees the rebuild's DDL, so its demo tables are dropped here (PostgreSQL makes them
    again from the first row changes) and it starts after the marker, skipping older events
    that belong to the old tables, like a freshly provisioned target. A MySQL-family group
    applies the DDL itself and resumes from its position when the THL still holds it.
    """
    for group in cfg.consumers:
        applier = build_applier(cfg.consumers[group].target, ApplierContext(cfg, group))
        replays_ddl = applier.capabilities.statements.value == "apply"
        stored = resumable(cfg, group) if replays_ddl else None
        if stored is not None:
            print(f"\n=== trepctl online -group {group} (resumes after seqno {stored}, "
                  f"THL at {marker}) ===", flush=True)
            run_cli("trep.trepctl", "online", "-group", group)
            continue
        if not replays_ddl:
            demo_target(cfg, group, TABLES).rebuild()
            print(f"\n{group}: demo tables dropped (DDL does not flow there; they are made "
                  "again from the THL)", flush=True)
        print(f"=== trepctl online -group {group} -from-seqno {marker + 1} ===", flush=True)
        run_cli("trep.trepctl", "online", "-group", group,
                "-from-seqno", str(marker + 1))


def rebuild_source() -> None:
    """Drop and recreate the demo tables on the source; the MariaDB target gets it via the THL.

    Tables, not the database: a replicated ``DROP DATABASE`` + ``CREATE DATABASE`` pair cannot
    be applied today (the ``CREATE`` is logged with the just-dropped database as its default
    schema; see ``prepare_mariadb_target``).
    """
    conn = mysql(SOURCE_PORT)
    try:
        with conn.cursor() as cur:
            for table in TABLES:
                # IF EXISTS: the first run finds nothing to drop, here and on the target.
                cur.execute(f"DROP TABLE IF EXISTS {SCHEMA}.{table.name}")
                cur.execute(table.mariadb)
        conn.commit()
    finally:
        conn.close()


# -- the workload --------------------------------------------------------------------------

class Workload:
    """Seeded random transactions over the demo tables, keeping track of live customers."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - demo data, not secrets
        self.live: list[int] = []
        self.next_id = 1
        self.counts: Counter[str] = Counter()
        #: The customers' e-mail column: renamed half-way (``RENAME_EMAIL``).
        self.email = "email"

    def _when(self, digits: int) -> dt.datetime:
        micros = self.rng.randrange(0, 365 * 86400 * 10**6)
        return EPOCH + dt.timedelta(microseconds=micros - micros % 10 ** (6 - digits))

    def _money(self, scale: int, high: int) -> decimal.Decimal | None:
        if self.rng.random() < 0.15:
            return None
        cents = self.rng.randrange(-high * 10**scale, high * 10**scale)
        return decimal.Decimal(cents).scaleb(-scale)

    def _blob(self, size: int) -> bytes | None:
        roll = self.rng.random()
        if roll < 0.2:
            return None
        if roll < 0.3:
            return b""  # empty is not NULL
        return self.rng.randbytes(self.rng.randint(1, size))

    def _customer(self, cid: int) -> tuple[object, ...]:
        name = self.rng.choice(NAMES)
        email = None if self.rng.random() < 0.25 else f"user{cid}@exämple.org"
        return (cid, name, email, self._money(2, 10**9), self._when(6),
                int(self.rng.random() < 0.8), self._blob(32))

    def _audit(self, cid: int, action: str) -> tuple[object, ...]:
        note = None if self.rng.random() < 0.2 else self.rng.choice(NOTES)
        return (cid, action, note, self._money(4, 10**6), self._blob(64), self._when(3))

    def transaction(self, cur: pymysql.cursors.Cursor) -> None:
        """One source transaction (the caller commits)."""
        kind = self.rng.choices(
            ("new", "update", "delete", "audit", "audit_update", "audit_delete"),
            weights=(30, 25, 8, 20, 10, 7))[0]
        if len(self.live) < 5:
            kind = "new"
        self.counts[kind] += 1
        insert_audit = (f"INSERT INTO {SCHEMA}.audit_log (customer_id, action, note, amount, "
                        "payload, logged_at) VALUES (%s, %s, %s, %s, %s, %s)")
        if kind == "new":
            for _ in range(self.rng.randint(1, 3)):
                cid, self.next_id = self.next_id, self.next_id + 1
                cur.execute(f"INSERT INTO {SCHEMA}.customers (id, name, {self.email}, balance, "
                            "joined, active, avatar) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            self._customer(cid))
                cur.execute(insert_audit, self._audit(cid, "signup"))
                self.live.append(cid)
        elif kind == "update":
            for cid in self.rng.sample(self.live, k=min(len(self.live), self.rng.randint(1, 4))):
                _, name, email, balance, _, active, avatar = self._customer(cid)
                cur.execute(f"UPDATE {SCHEMA}.customers SET name = %s, {self.email} = %s, "
                            "balance = %s, active = %s, avatar = %s WHERE id = %s",
                            (name, email, balance, active, avatar, cid))
        elif kind == "delete":
            cid = self.live.pop(self.rng.randrange(len(self.live)))
            cur.execute(f"DELETE FROM {SCHEMA}.customers WHERE id = %s", (cid,))
            cur.execute(insert_audit, self._audit(cid, "close"))
        elif kind == "audit":
            rows = [self._audit(self.rng.choice(self.live), "visit")
                    for _ in range(self.rng.randint(1, 5))]
            if self.rng.random() < 0.3:
                rows.append(rows[0])  # an exact duplicate: legal without a primary key
            cur.executemany(insert_audit, rows)
        elif kind == "audit_update":
            cid = self.rng.choice(self.live)
            _, _, note, amount, payload, _ = self._audit(cid, "visit")
            cur.execute(f"UPDATE {SCHEMA}.audit_log SET note = %s, amount = %s, payload = %s "
                        "WHERE customer_id = %s LIMIT 1", (note, amount, payload, cid))
        else:
            cur.execute(f"DELETE FROM {SCHEMA}.audit_log WHERE customer_id = %s LIMIT 1",
                        (self.rng.choice(self.live),))


def run_workload(transactions: int, seed: int) -> tuple[Workload, str, str]:
    """Commit the workload on the source, with ``RENAME_EMAIL`` half-way; the GTIDs of the
    rename and of the last transaction."""
    work = Workload(seed)
    conn = mysql(SOURCE_PORT)
    renamed = ""
    try:
        with conn.cursor() as cur:
            for done in range(transactions):
                if done == transactions // 2:
                    cur.execute(RENAME_EMAIL)
                    cur.execute("SELECT @@last_gtid")
                    renamed = str((cur.fetchone() or [""])[0])
                    work.email = "contact_email"
                work.transaction(cur)
                conn.commit()
            # A last transaction that surely changes a row, so its GTID reaches the THL (an
            # UPDATE that matched nothing leaves no event behind).
            cur.execute(f"INSERT INTO {SCHEMA}.audit_log (customer_id, action, note, "
                        "logged_at) VALUES (0, 'done', 'end of the demo workload', %s)",
                        (EPOCH,))
            conn.commit()
            cur.execute("SELECT @@last_gtid")
            row = cur.fetchone()
    finally:
        conn.close()
    if row is None or not row[0] or not renamed:
        raise SystemExit("the source reports no GTID for the workload")
    return work, renamed, str(row[0])


def _gtid(text: str) -> tuple[int, int]:
    """(domain, sequence) of a MariaDB GTID ``domain-server-sequence``."""
    domain, _, seq = text.split("-")
    return int(domain), int(seq)


def wait_thl_holds(cfg: ServiceConfig, gtid: str, runner: subprocess.Popen[bytes],
                   log: Path) -> ThlEvent:
    """The THL tail once it holds the source transaction ``gtid``."""
    want = _gtid(gtid)
    deadline = time.monotonic() + 120
    while True:
        tail = thl_tail(cfg)
        have = tail.metadata.get("gtid") if tail is not None else None
        if tail is not None and have:
            domain, seq = _gtid(have)
            if domain == want[0] and seq >= want[1]:
                return tail
        if runner.poll() is not None:
            raise SystemExit(f"the runner exited with code {runner.returncode}; see {log}")
        if time.monotonic() > deadline:
            raise SystemExit(f"GTID {gtid} did not reach the THL within 120 s; see {log}")
        time.sleep(0.3)


def event_of(cfg: ServiceConfig, gtid: str, first: int, last: int) -> int | None:
    """The seqno of the source transaction ``gtid`` between seqnos ``first`` and ``last``."""
    with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
        for rec in reader.records(reader.offset_of(first, 0)):
            if rec.seqno > last:
                return None
            if rec.event is not None and rec.event.metadata.get("gtid") == gtid:
                return rec.seqno
    return None


# -- comparison ----------------------------------------------------------------------------

def compare(cfg: ServiceConfig) -> bool:
    """Print the comparison table; True if every target equals the source everywhere."""
    conn = mysql(SOURCE_PORT)
    try:
        with conn.cursor() as cur:
            source = {}
            for table in TABLES:
                cur.execute(f"SELECT {', '.join(table.columns)} FROM {SCHEMA}.{table.name}")
                source[table.name] = digest(cur.fetchall())
        conn.commit()
    finally:
        conn.close()
    targets = {group: demo_target(cfg, group, TABLES).digests() for group in cfg.consumers}
    return report([t.name for t in TABLES], source, targets)


# -- main ----------------------------------------------------------------------------------

def demo(cfg: ServiceConfig, runner: subprocess.Popen[bytes], since: float, log: Path,
         transactions: int, seed: int) -> int:
    """Everything the running runner is needed for; 0 when the targets equal the source."""
    wait_extractor_online(cfg, runner, since, log)
    marker = mark_source(cfg, runner, log)
    start_groups(cfg, marker)
    rebuild_source()
    started = time.monotonic()
    work, renamed, gtid = run_workload(transactions, seed)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(work.counts.items()))
    print(f"\nworkload: {transactions + 1} transactions committed on the source in "
          f"{time.monotonic() - started:.1f} s ({kinds}, 1 final marker), and half-way "
          f"one schema change: {RENAME_EMAIL}; last GTID {gtid}", flush=True)
    tail = wait_thl_holds(cfg, gtid, runner, log)
    ddl = event_of(cfg, renamed, marker, tail.seqno)
    if ddl is not None:
        print(f"\n=== the schema change: thl list -seqno {ddl} ===\n", flush=True)
        run_cli("trep.thl", "list", "-seqno", str(ddl))

    print("\n=== thl list -last 3 ===\n", flush=True)
    run_cli("trep.thl", "list", "-last", "3")
    print("=== trepctl status (while the consumers apply) ===", flush=True)
    run_cli("trep.trepctl", "status")
    print(f"\n=== trepctl wait -applied {tail.seqno} ===", flush=True)
    if run_cli("trep.trepctl", "wait", "-applied", str(tail.seqno),
               "-limit", "180") != 0:
        print(f"the consumers did not apply seqno {tail.seqno}; see {log}", file=sys.stderr)
        return 1
    print("\n=== thl info ===", flush=True)
    run_cli("trep.thl", "info")
    print("\n=== source vs targets ===", flush=True)
    if not compare(cfg):
        print("the targets differ from the source", file=sys.stderr)
        return 1
    print("every target holds exactly the source's rows")
    return 0


def verbatim(doc: str) -> str:
    """``doc`` as click help that keeps its line breaks (each paragraph marked ``\\b``)."""
    return "\n\n".join(f"\b\n{part}" for part in doc.strip().split("\n\n"))


def start_console() -> None:
    """``trep-console`` for the demo's service, left running like the servers (one from an
    earlier run is replaced); its address printed."""
    pid_file = RUN_DIR / "console.pid"
    if pid_file.exists():
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
            time.sleep(0.5)
    url = f"http://127.0.0.1:{port('console')}/"
    with (RUN_DIR / "console.log").open("ab") as out:
        console = subprocess.Popen([PY, "-m", "trep.console", "serve", "-c", str(CONFIG),
                                    "--port", str(port("console"))], cwd=ROOT, stdout=out,
                                   stderr=out, start_new_session=True)
    pid_file.write_text(str(console.pid))
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}health", timeout=2):  # noqa: S310 - http
                break
        except OSError:
            if console.poll() is not None or time.monotonic() > deadline:
                print(f"the console did not start; see {RUN_DIR / 'console.log'}",
                      file=sys.stderr)
                return
            time.sleep(0.2)
    acting = "actions need a login" if (os.environ.get("TREP_CONSOLE_USERS")
                                        or os.environ.get("TREP_CONSOLE_TOKEN")) \
        else "read-only: set TREP_CONSOLE_TOKEN to act from it"
    print(f"=== the console: {url} ({acting}; it keeps running, like the servers) ===",
          flush=True)


@click.command(help=verbatim(__doc__ or ""),
               context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--transactions", type=int, default=300,
              help="source transactions in the workload")
@click.option("--seed", type=int, default=7)
def main(transactions: int, seed: int) -> None:
    """Run the demo; exit 0 when every target holds exactly the source's demo tables."""
    sys.exit(run(transactions, seed))


def run(transactions: int, seed: int) -> int:
    """The demo with this workload; 0 when every target holds exactly the source's."""
    text = TEMPLATE.read_text()
    for name, default in DEFAULT_PORTS.items():
        text = text.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port(name)}")
        text = text.replace(f"port: {default}", f"port: {port(name)}")
    text = text.replace("@RUN_DIR@", str(RUN_DIR))
    data = yaml.safe_load(text)
    for group in data.get("consumers", {}).values():
        if group["target"].get("type") == "warehouse":
            # The stack's Spark settings (pre-fetched Delta jars) in place of the defaults.
            group["target"].setdefault("spark", warehouse_spark("local[2]"))
    CONFIG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG.write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = load_config(CONFIG)
    log = RUN_DIR / "demo-runner.log"
    log.parent.mkdir(exist_ok=True)
    purged = purged_binlog(cfg)
    if purged is not None:
        # `make test` purges the shared source's binlogs; the THL cannot be continued then.
        print(f"=== the THL's resume point, binlog {purged}, was purged from the source: "
              f"starting {cfg.thl_topic} afresh ===", flush=True)
        restart_extraction(cfg)
    prepare_mariadb_target()
    # Both groups wait OFFLINE until start_groups() says where each one starts.
    print("=== trepctl offline ===", flush=True)
    if run_cli("trep.trepctl", "offline") != 0:
        return 1

    start_console()
    since = time.time()
    with log.open("ab") as out:
        runner = subprocess.Popen([PY, "-m", "trep.runner", "-c", str(CONFIG)], cwd=ROOT,
                                  stdout=out, stderr=out)
    print(f"runner started (pid {runner.pid}, log {log})", flush=True)
    try:
        result = demo(cfg, runner, since, log, transactions, seed)
    finally:
        runner.send_signal(signal.SIGTERM)
        try:
            code = runner.wait(60)
        except subprocess.TimeoutExpired:
            runner.kill()
            code = runner.wait()
        print(f"runner stopped (exit code {code})")
    # A component that failed on the way (it logs why) fails the demo even if the data match.
    return result or (1 if code else 0)


if __name__ == "__main__":
    main()
