"""Apply benchmark: THL events into the MariaDB target and PostgreSQL, next to a bulk insert.

``make bench`` runs it against the local stack. Method, on a fresh service:

1. create ``abench_<service>.items`` (primary key, int, varchar, decimal, datetime) on the
   source and, by hand, on both targets; seed the source's ``trep_commit_seqno`` right after
   the DDL, so the THL holds the rows only;
2. start the extractor alone (``trep-run --no-consumers``), commit ``--rows`` rows as
   transactions of ``--txn-rows`` rows, wait until the THL holds them all, stop it;
3. for each target and each ``--blocks`` value (``block_commit_events``): empty the target
   table, clear the stored position, start that consumer group alone
   (``trep-run --no-extractor --consumer NAME``) and time it from process start until
   ``trep_commit_seqno`` on the target reaches the THL tail (polled every 50 ms; it is
   written in the same transaction as the rows, so it is exact to the poll);
4. as the reference, insert the same rows into a fresh table on each target with the
   driver's ``executemany`` in one transaction.

Reported per run: wall seconds (including process start-up, ZooKeeper, Kafka and the epoch
handshake), rows/s and events/s on that wall time, the steady rate (first to last block
commit), CPU seconds of the consumer process, and the ratio to the bulk insert's rows/s.
Everything the benchmark created (schemas, THL topic, consumer groups, znodes) is removed
afterwards. Not a test: nothing is asserted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import options
import psycopg
import sqlalchemy as sa
from group_timing import pick, time_group
from items import DDL, INSERT, Row, extract_items, make_rows
from processes import ROOT
from results import write_result
from service import (
    HOST,
    connect_mysql,
    drop_schemas,
    extractor,
    remove_service,
    seed_start,
    write_config,
)

from consumers.sql.config import SqlTarget
from replicator.tracking import CommitSeqnoTable
from trep.config import ServiceConfig, load_config

RUN = ROOT / ".run"
BOOTSTRAP = "127.0.0.1:19092"
ZOOKEEPER = "127.0.0.1:12181"
SOURCE_ID = "apply-bench"
PG_DDL = ("CREATE TABLE {table} (id integer NOT NULL PRIMARY KEY, qty integer NOT NULL, "
          "label varchar(64) NOT NULL, price numeric(12,2) NOT NULL, created timestamp NOT NULL)")
TARGETS = ("mariadb", "postgresql")


@dataclass(frozen=True)
class Ports:
    """Where the servers of the local stack listen."""

    source: int
    target: int
    pg: int


def _pg(port: int, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(host=HOST, port=port, user="postgres", dbname="postgres",
                           options="-c timezone=UTC", autocommit=autocommit)


def write_service(service: str, schema: str, ports: Ports, blocks: Sequence[int]) -> Path:
    """The benchmark service: one consumer group per target and block size."""
    consumers: dict[str, Any] = {}
    for block in blocks:
        consumers[f"mariadb_b{block}"] = {
            "target": {"type": "sql", "url": f"mysql+pymysql://root@{HOST}:{ports.target}/"},
            "block_commit_events": block}
        consumers[f"postgresql_b{block}"] = {
            "target": {"type": "sql", "statements": "skip",
                       "url": f"postgresql+psycopg://postgres@{HOST}:{ports.pg}/postgres"},
            "block_commit_events": block}
    return write_config(RUN / f"{service}.yml", service, {
        "kafka": {"bootstrap_servers": BOOTSTRAP},
        "zookeeper": {"hosts": ZOOKEEPER},
        "source": {"host": HOST, "port": ports.source, "user": "root", "password": ""},
        "extractor": extractor(service, 9000, 1000, [schema], SOURCE_ID),
        "consumers": consumers,
    })


def prepare(cfg: ServiceConfig, schema: str, ports: Ports) -> None:
    """The table on the three servers, and the extractor's start right after the DDL."""
    # The DDL stays out of the THL: both targets get the same hand-made table.
    seed_start(ports.source, cfg.tracking_schema, SOURCE_ID,
               [f"CREATE DATABASE {schema}", DDL.format(table=f"{schema}.items")])
    conn = connect_mysql(ports.target)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {schema}")
        cur.execute(DDL.format(table=f"{schema}.items"))
    conn.commit()
    conn.close()
    with _pg(ports.pg) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"'.encode())
        pg.execute(PG_DDL.format(table=f'"{schema}".items').encode())


def _sql(cfg: ServiceConfig, group: str) -> SqlTarget:
    target = cfg.consumers[group].target
    if not isinstance(target, SqlTarget):
        raise TypeError(f"{group} is not a SQL group")
    return target


def reset_target(cfg: ServiceConfig, group: str, schema: str) -> sa.Engine:
    """Empty the target table and clear the stored position; an autocommit engine to poll."""
    engine = sa.create_engine(_sql(cfg, group).engine_url(), isolation_level="AUTOCOMMIT")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    q = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        tracking.create(conn)
        conn.execute(sa.delete(tracking.table))
        conn.execute(sa.text(f"DELETE FROM {q(schema)}.items"))
    return engine


def applied_seqno(engine: sa.Engine, cfg: ServiceConfig) -> int:
    """``trep_commit_seqno.seqno`` on the target (-1: nothing committed yet)."""
    table = CommitSeqnoTable(cfg.tracking_schema).table
    with engine.connect() as conn:
        value = conn.execute(sa.select(table.c.seqno).where(table.c.task_id == 0)).scalar()
    return -1 if value is None else int(value)


def measure_apply(cfg: ServiceConfig, config: Path, group: str, schema: str, tail: int,
                  rows: int, timeout: float) -> dict[str, Any]:
    """Run one consumer group alone from an empty target to the THL tail, timed."""
    engine = reset_target(cfg, group, schema)
    run = time_group(config, RUN / f"{cfg.service}-{group}.log", group,
                     lambda: applied_seqno(engine, cfg), tail, timeout)
    q = engine.dialect.identifier_preparer.quote
    with engine.connect() as conn:
        on_target = conn.execute(sa.text(f"SELECT COUNT(*) FROM {q(schema)}.items")).scalar()
    engine.dispose()
    figures = run.figures(rows, tail)
    return {"target": group.rsplit("_b", 1)[0],
            "block_commit_events": cfg.consumers[group].block_commit_events,
            **pick(figures, "wall_seconds", "rows_per_second", "events_per_second",
                   "cpu_seconds"),
            "rows_on_target": on_target,
            **pick(figures, "steady_rows_per_second", "startup_seconds")}


def bulk_insert_mariadb(port: int, schema: str, rows: list[Row]) -> float:
    """Seconds for one executemany of every row into a fresh table, one transaction."""
    conn = connect_mysql(port)
    try:
        with conn.cursor() as cur:
            cur.execute(DDL.format(table=f"{schema}.items_ref"))
            started = time.monotonic()
            cur.executemany(INSERT.format(table=f"{schema}.items_ref"), rows)
            conn.commit()
            return time.monotonic() - started
    finally:
        conn.close()


def bulk_insert_postgresql(port: int, schema: str, rows: list[Row]) -> float:
    """Seconds for one executemany of every row into a fresh table, one transaction."""
    with _pg(port, autocommit=False) as conn:
        conn.execute(PG_DDL.format(table=f'"{schema}".items_ref').encode())
        conn.commit()
        started = time.monotonic()
        with conn.cursor() as cur:
            cur.executemany(INSERT.format(table=f'"{schema}".items_ref').encode(), rows)
        conn.commit()
        return time.monotonic() - started


def bulk_inserts(ports: Ports, schema: str, rows: list[Row], targets: Sequence[str]
                 ) -> dict[str, dict[str, float]]:
    """The reference: seconds and rows/s of each target's bulk insert."""
    reference: dict[str, dict[str, float]] = {}
    for target in targets:
        print(f"bulk insert into {target} ...", flush=True)
        seconds = (bulk_insert_mariadb(ports.target, schema, rows) if target == "mariadb"
                   else bulk_insert_postgresql(ports.pg, schema, rows))
        reference[target] = {"seconds": round(seconds, 2),
                             "rows_per_second": round(len(rows) / seconds)}
    return reference


def add_ratios(runs: list[dict[str, Any]], reference: dict[str, dict[str, float]]) -> None:
    """Each run's rates against its target's bulk insert."""
    for run in runs:
        run["bulk_insert_rows_per_second"] = reference[run["target"]]["rows_per_second"]
        # Against the bulk insert, the wall-clock rate includes process start-up.
        run["ratio_to_bulk_insert"] = round(
            run["rows_per_second"] / run["bulk_insert_rows_per_second"], 3)
        if "steady_rows_per_second" in run:
            run["steady_ratio_to_bulk_insert"] = round(
                run["steady_rows_per_second"] / run["bulk_insert_rows_per_second"], 3)


def cleanup(cfg: ServiceConfig, config: Path, schema: str, ports: Ports) -> None:
    """Remove what the benchmark created: schemas, THL topic, consumer groups, znodes."""
    for port in (ports.source, ports.target):
        drop_schemas(port, [schema, cfg.tracking_schema])
    with _pg(ports.pg) as pg:
        pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
        pg.execute(f'DROP SCHEMA IF EXISTS "{cfg.tracking_schema}" CASCADE'.encode())
    remove_service(cfg, config)


def benchmark(rows: int, txn_rows: int, blocks: list[int], targets: list[str], ports: Ports,
              timeout: float, keep: bool) -> dict[str, Any]:
    """Fill a fresh service's THL, time every group on it, then the bulk inserts."""
    service = f"apply{uuid.uuid4().hex[:6]}"
    schema = f"abench_{service}"
    config = write_service(service, schema, ports, blocks)
    cfg = load_config(config)
    data = make_rows(rows)
    try:
        prepare(cfg, schema, ports)
        tail, fill_seconds = extract_items(
            cfg, config, RUN / f"{service}-extractor.log", ports.source,
            [f"{schema}.items"], data, txn_rows)
        runs = []
        for target in targets:
            for block in blocks:
                group = f"{target}_b{block}"
                print(f"applying with {group} ...", flush=True)
                runs.append(measure_apply(cfg, config, group, schema, tail, rows, timeout))
        reference = bulk_inserts(ports, schema, data, targets)
        add_ratios(runs, reference)
    finally:
        if not keep:
            cleanup(cfg, config, schema, ports)
    return {
        "benchmark": "apply",
        "rows": rows, "rows_per_transaction": txn_rows,
        "transactions": -(-rows // txn_rows),
        # THL events applied: the transactions plus the extractor's own CREATE SCHEMA IF NOT
        # EXISTS of its tracking schema, which it extracts at start-up.
        "events": tail + 1,
        "thl_fill_seconds": round(fill_seconds, 2),
        "runs": runs,
        "bulk_insert": reference,
        "note": "wall time and its rates include consumer start-up (imports, ZooKeeper, Kafka, "
                "epoch handshake); steady rates run from the first block commit to the last. "
                "Bulk insert: the driver's executemany of the same rows in one transaction.",
    }


@options.command(__doc__)
@options.rows(20_000)
@options.txn_rows()
@options.blocks("10,100")
@click.option("--targets", default="mariadb,postgresql",
              help="targets to measure, comma-separated")
@options.timeout("seconds one apply run may take at most")
@click.option("--source-port", type=int, default=13306)
@click.option("--target-port", type=int, default=13307)
@click.option("--pg-port", type=int, default=15432)
@options.keep("leave the schemas, topic and znodes behind for inspection")
@options.out("apply.json")
def main(rows: int, txn_rows: int, blocks: str, targets: str, timeout: float,
         source_port: int, target_port: int, pg_port: int, keep: bool, out: Path) -> None:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    chosen = options.comma_list(targets)
    unknown = set(chosen) - set(TARGETS)
    if unknown:
        raise click.UsageError(f"unknown target(s): {', '.join(sorted(unknown))}")
    result = benchmark(rows, txn_rows, [int(b) for b in options.comma_list(blocks)], chosen,
                       Ports(source_port, target_port, pg_port), timeout, keep)
    write_result(result, out)


if __name__ == "__main__":
    main()
