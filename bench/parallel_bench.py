"""Parallel apply benchmark: a four-schema workload applied to MariaDB with 1, 2 and 4 channels.

``make bench`` runs it against the local stack (ports from the stack's settings, so a slot's
environment is honoured). Method, on a fresh service:

1. four schemas ``pbench_<service>_0`` .. ``_3``, each with an ``items`` table (primary key,
   int, varchar, decimal, datetime), on the source and, by hand, on the target; the source's
   ``trep_commit_seqno`` is seeded right after the DDL, so the THL holds the rows only;
2. the extractor alone (``trep-run --no-consumers``) takes ``--rows`` rows committed as
   transactions of ``--txn-rows`` rows, each transaction in one schema, round robin; it
   stops once the THL holds the last one;
3. runs alternate the channel counts (1, 2, 4, 1, 2, 4, ... ``--repeat`` times, so a noisy
   neighbour hurts every count alike): empty the tables, clear ``trep_commit_seqno`` and
   ``trep_shard_channel``, assign schema *i* to channel *i mod N* in ``trep_shard_channel``
   (``--assign pinned``, the default: balanced whatever crc32 makes of the random schema
   names; ``--assign crc32`` leaves the default hash), start that group alone
   (``trep-run --no-extractor --consumer cN``) and time it until every channel's row of
   ``trep_commit_seqno`` reaches the THL tail (polled every 50 ms; written in the same
   transaction as the rows);
4. per run: wall seconds (process start included), rows/s, the steady rate (first commit to
   the end), CPU seconds of the consumer process; per channel count: medians, and the
   speedup of the median steady rate over one channel's.

Everything the benchmark created is removed afterwards. Not a test: nothing is asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import uuid
import zlib
from pathlib import Path
from typing import Any

import click
import options
import sqlalchemy as sa
from group_timing import pick, time_group
from items import DDL, insert_rows, make_rows
from processes import ROOT
from results import write_result
from service import (
    connect_mysql,
    drop_schemas,
    extractor,
    remove_service,
    seed_start,
    stack_servers,
    write_config,
)
from thl_fill import fill_thl

from replicator.tracking import CommitSeqnoTable
from stack.settings import port
from trep.config import ServiceConfig, load_config

RUN = ROOT / ".run"
SCHEMAS = 4
SOURCE_ID = "parallel-bench"


def write_service(service: str, schemas: list[str], counts: list[int], block: int) -> Path:
    """One consumer group per channel count, all on the MariaDB target."""
    target = f"mysql+pymysql://root@127.0.0.1:{port('mariadb-target')}/"
    return write_config(RUN / f"{service}.yml", service, {
        **stack_servers(),
        "extractor": extractor(service, 8000, 1000, schemas, SOURCE_ID),
        "consumers": {f"c{n}": {"target": {"type": "sql", "url": target}, "channels": n,
                                "block_commit_events": block} for n in counts},
    })


def prepare(cfg: ServiceConfig, schemas: list[str]) -> None:
    """The tables on both servers, and the extractor's start right after the DDL."""
    seed_start(port("mariadb-source"), cfg.tracking_schema, SOURCE_ID,
               [ddl for s in schemas
                for ddl in (f"CREATE DATABASE {s}", DDL.format(table=f"{s}.items"))])
    target = connect_mysql(port("mariadb-target"))
    with target.cursor() as cur:
        for s in schemas:
            cur.execute(f"CREATE DATABASE {s}")
            cur.execute(DDL.format(table=f"{s}.items"))
    target.commit()
    target.close()


def reset_target(cfg: ServiceConfig, schemas: list[str], channels: int, assign: str
                 ) -> sa.Engine:
    """Empty tables, no position, the shard assignment of this run; an engine to poll."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port('mariadb-target')}/",
                              isolation_level="AUTOCOMMIT")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    shard_channel = tracking.metadata.tables[f"{cfg.tracking_schema}.trep_shard_channel"]
    with engine.begin() as conn:
        tracking.create(conn)
        conn.execute(sa.delete(tracking.table))
        conn.execute(sa.delete(shard_channel))
        for s in schemas:
            conn.execute(sa.text(f"DELETE FROM {s}.items"))
        if assign == "pinned":
            conn.execute(sa.insert(shard_channel), [{"shard_id": s, "channel": i % channels}
                                                    for i, s in enumerate(schemas)])
    return engine


def progress(engine: sa.Engine, cfg: ServiceConfig, channels: int) -> int:
    """The group's restart point: the lowest channel's seqno (-1 until every channel has
    a row)."""
    table = CommitSeqnoTable(cfg.tracking_schema).table
    with engine.connect() as conn:
        count, low = conn.execute(sa.select(sa.func.count(), sa.func.min(table.c.seqno))).one()
    return int(low) if count == channels and low is not None else -1


def measure(cfg: ServiceConfig, config: Path, schemas: list[str], channels: int, tail: int,
            rows: int, assign: str, timeout: float) -> dict[str, Any]:
    """One group from empty tables to the THL tail, timed."""
    engine = reset_target(cfg, schemas, channels, assign)
    group = f"c{channels}"
    run = time_group(config, RUN / f"{cfg.service}-{group}.log", group,
                     lambda: progress(engine, cfg, channels), tail, timeout)
    with engine.connect() as conn:
        on_target = sum(int(conn.execute(sa.text(f"SELECT COUNT(*) FROM {s}.items")).scalar()
                            or 0) for s in schemas)
    engine.dispose()
    figures = run.figures(rows, tail)
    return {"channels": channels,
            **pick(figures, "wall_seconds", "rows_per_second", "cpu_seconds"),
            "rows_on_target": on_target,
            **pick(figures, "steady_rows_per_second", "startup_seconds")}


def cleanup(cfg: ServiceConfig, config: Path, schemas: list[str]) -> None:
    """Remove what the benchmark created: schemas, THL topic, consumer groups, znodes."""
    for which in ("mariadb-source", "mariadb-target"):
        drop_schemas(port(which), [*schemas, cfg.tracking_schema])
    remove_service(cfg, config)


def summarize(runs: list[dict[str, Any]], counts: list[int]) -> dict[str, Any]:
    """Per channel count: the medians, and the steady speedup over the first count's."""
    summary: dict[str, Any] = {}
    for n in counts:
        mine = [r for r in runs if r["channels"] == n]
        summary[str(n)] = {
            "median_rows_per_second": round(statistics.median(
                r["rows_per_second"] for r in mine)),
            "median_steady_rows_per_second": round(statistics.median(
                r.get("steady_rows_per_second", 0) for r in mine)),
            "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in mine), 2),
        }
    base = summary[str(counts[0])]["median_steady_rows_per_second"] or 1
    for n in counts:
        summary[str(n)]["steady_speedup"] = round(
            summary[str(n)]["median_steady_rows_per_second"] / base, 2)
    return summary


def benchmark(rows: int, txn_rows: int, counts: list[int], repeat: int, block: int,
              assign: str, timeout: float, keep: bool) -> dict[str, Any]:
    """Fill a fresh service's THL over four schemas, then alternate the channel counts."""
    service = f"par{uuid.uuid4().hex[:6]}"
    schemas = [f"pbench_{service}_{i}" for i in range(SCHEMAS)]
    config = write_service(service, schemas, counts, block)
    cfg = load_config(config)
    runs: list[dict[str, Any]] = []
    try:
        prepare(cfg, schemas)
        print(f"service {service}: extracting {rows} rows over {SCHEMAS} schemas ...",
              flush=True)
        # Each transaction in one schema, round robin.
        tables = [f"{s}.items" for s in schemas]
        tail, fill_seconds = fill_thl(
            cfg, config, RUN / f"{service}-extractor.log", port("mariadb-source"),
            lambda conn: insert_rows(conn, tables, make_rows(rows), txn_rows))
        for round_ in range(repeat):
            for n in counts:
                print(f"round {round_ + 1}: {n} channel(s) ...", flush=True)
                runs.append(measure(cfg, config, schemas, n, tail, rows, assign, timeout))
                print(json.dumps(runs[-1]), flush=True)
    finally:
        if not keep:
            cleanup(cfg, config, schemas)
    return {
        "benchmark": "parallel-apply",
        "target": "mariadb",
        "rows": rows, "rows_per_transaction": txn_rows, "schemas": SCHEMAS,
        "events": tail + 1, "block_commit_events": block, "assign": assign,
        "crc32_assignment": {str(n): [zlib.crc32(s.encode()) % n for s in schemas]
                             for n in counts},
        "cpus": os.cpu_count(), "thl_fill_seconds": round(fill_seconds, 2),
        "runs": runs, "summary": summarize(runs, counts),
        "note": "runs alternate the channel counts; medians per count. Wall rates include "
                "process start-up and the handshake; steady rates run from the first commit "
                "(every channel has a row) to the THL tail.",
    }


@options.command(__doc__)
@options.rows(40_000)
@options.txn_rows()
@click.option("--channels", default="1,2,4", help="channel counts, comma-separated")
@click.option("--repeat", type=int, default=3, help="runs per channel count")
@click.option("--block", type=int, default=10, help="block_commit_events")
@click.option("--assign", type=click.Choice(["pinned", "crc32"]), default="pinned",
              help="shard assignment: schema i on channel i mod N, or the hash")
@options.timeout()
@options.keep("leave everything behind")
@options.out("parallel.json")
def main(rows: int, txn_rows: int, channels: str, repeat: int, block: int, assign: str,
         timeout: float, keep: bool, out: Path) -> None:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    counts = [int(c) for c in options.comma_list(channels)]
    write_result(benchmark(rows, txn_rows, counts, repeat, block, assign, timeout, keep), out)


if __name__ == "__main__":
    main()
