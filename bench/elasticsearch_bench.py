"""Elasticsearch apply benchmark: THL events into Elasticsearch, beside a raw bulk load.

``make bench`` runs it against the local stack (ports from ``stack.settings.port``). Method,
on a fresh service:

1. create ``ebench_<service>.items`` (primary key, int, varchar, decimal, datetime) on the
   source; seed the source's ``trep_commit_seqno`` right after the DDL, so the THL holds the
   rows only;
2. start the extractor alone (``trep-run --no-consumers``), commit ``--rows`` rows as
   transactions of ``--txn-rows`` rows, wait until the THL holds them all, stop it;
3. start the Elasticsearch consumer group alone (``trep-run --no-extractor --consumer es``,
   the applier's default block limits) on an empty cluster state for this service, and
   time it from process start until the position document in ``tungsten_<service>``
   reaches the THL tail (polled every 50 ms; it is written after the block's documents, so
   it is exact to the poll);
4. as the reference, write the same documents (the ``_source`` the applier wrote, read
   back) into a fresh index with the same mapping, with the same client library's
   ``helpers.bulk``, ``--raw-chunk`` documents per request (default: the applier's rows per
   block), one request at a time, no refresh.

Reported: wall seconds (including process start-up, ZooKeeper, Kafka and the epoch
handshake), the steady rate (first to last position write) in rows/s, CPU seconds of the
consumer process (total, steady, and per million rows), the raw bulk's rows/s and CPU
seconds (this process), and the ratio steady/raw (goal: 0.7 or more). Everything the
benchmark created is removed afterwards. Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import sqlalchemy as sa
import yaml
from confluent_kafka.admin import AdminClient
from elasticsearch import Elasticsearch, helpers
from kazoo.exceptions import NoNodeError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from consumers.registry import ApplierContext, build_applier  # noqa: E402
from replicator.tracking import CommitSeqno, CommitSeqnoTable  # noqa: E402
from replicator.zk import connect  # noqa: E402
from stack.settings import RUN_DIR, port  # noqa: E402
from thl_topics.errors import ThlTopicMissing  # noqa: E402
from thl_topics.reader import ThlReader  # noqa: E402
from trep.config import ServiceConfig, load_config  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
GROUP = "es"
COLUMNS = ("id", "qty", "label", "price", "created")
DDL = ("CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, qty INT NOT NULL, "
       "label VARCHAR(64) NOT NULL, price DECIMAL(12,2) NOT NULL, "
       "created DATETIME NOT NULL) DEFAULT CHARSET=utf8mb4")

Row = tuple[int, int, str, decimal.Decimal, dt.datetime]


def make_rows(count: int) -> list[Row]:
    """``count`` seeded rows (the same generator as the SQL apply benchmark)."""
    rng = random.Random(42)
    base = dt.datetime(2024, 1, 1)  # noqa: DTZ001 - a DATETIME column is naive
    return [(i, rng.randint(0, 10_000), f"item {i} {rng.getrandbits(64):016x}",
             decimal.Decimal(rng.randrange(0, 10**9)).scaleb(-2),
             base + dt.timedelta(seconds=rng.randrange(0, 365 * 86400)))
            for i in range(1, count + 1)]


def _mysql(autocommit: bool = False) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=port("mariadb-source"), user="root",
                           password="", charset="utf8mb4", autocommit=autocommit)


def es_url() -> str:
    return f"http://127.0.0.1:{port('elasticsearch')}"


def write_config(service: str, schema: str) -> Path:
    path = RUN_DIR / f"{service}.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "service": service,
        "kafka": {"bootstrap_servers": f"127.0.0.1:{port('kafka')}"},
        "zookeeper": {"hosts": f"127.0.0.1:{port('zookeeper')}"},
        "source": {"host": "127.0.0.1", "port": port("mariadb-source"), "user": "root",
                   "password": ""},
        "extractor": {
            # Its own replication client id: the source drops the older of two clients that
            # announce the same one.
            "server_id": 9500 + int(service[-4:], 16) % 400,
            "source_id": "es-bench",
            "filters": {"replicate": [f"{schema}.*"]}},
        "consumers": {GROUP: {"target": {"type": "elasticsearch", "hosts": [es_url()]}}},
    }))
    return path


def prepare(cfg: ServiceConfig, schema: str) -> None:
    """The table on the source, and the extractor's start right after the DDL."""
    engine = sa.create_engine(f"mysql+pymysql://root@127.0.0.1:{port('mariadb-source')}/")
    tracking = CommitSeqnoTable(cfg.tracking_schema)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {schema}"))
        conn.execute(sa.text(DDL.format(table=f"{schema}.items")))
        tracking.create(conn)
        status = conn.execute(sa.text("SHOW MASTER STATUS")).first()
        if status is None:
            raise SystemExit("the source has no binary log")
        file, pos = status[0], int(status[1])
        tracking.write(conn, CommitSeqno(seqno=-1, epoch=0, eventid=f"{file}:{pos:016d};0",
                                         source_id="es-bench"))
    engine.dispose()


def thl_tail(cfg: ServiceConfig) -> tuple[int, str | None]:
    """Seqno (-1: none yet) and source GTID of the last event in the THL."""
    try:
        with ThlReader(cfg.kafka.bootstrap_servers, cfg.thl_topic) as reader:
            tail = reader.tail()
    except ThlTopicMissing:
        return -1, None
    if tail is None or tail.event is None:
        return -1, None
    return tail.seqno, tail.event.metadata.get("gtid")


def _gtid_seq(gtid: str) -> tuple[int, int]:
    domain, _, seq = gtid.split("-")
    return int(domain), int(seq)


def start_runner(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "trep.runner", "-c", str(config),
                                 *args], cwd=ROOT, stdout=out, stderr=out,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))


def stop_runner(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def fill_thl(cfg: ServiceConfig, config: Path, schema: str, rows: list[Row],
             txn_rows: int) -> tuple[int, float]:
    """Extract the workload into the THL with the extractor alone; (tail seqno, seconds)."""
    log = RUN_DIR / f"{cfg.service}-extractor.log"
    started = time.monotonic()
    proc = start_runner(config, log, "--no-consumers")
    try:
        conn = _mysql()
        insert = f"INSERT INTO {schema}.items ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s)"
        with conn.cursor() as cur:
            for start in range(0, len(rows), txn_rows):
                cur.executemany(insert, rows[start:start + txn_rows])
                conn.commit()
            cur.execute("SELECT @@last_gtid")
            found = cur.fetchone()
        conn.close()
        if found is None or not found[0]:
            raise SystemExit("the source reports no GTID for the workload")
        want = _gtid_seq(str(found[0]))
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the extractor exited; see {log}")
            last, gtid = thl_tail(cfg)
            if gtid is not None and _gtid_seq(gtid)[0] == want[0] and \
                    _gtid_seq(gtid)[1] >= want[1]:
                return last, time.monotonic() - started
            time.sleep(0.5)
    finally:
        stop_runner(proc)


def applied_seqno(es: Elasticsearch, cfg: ServiceConfig) -> int:
    """The group's stored seqno (-1: nothing committed yet)."""
    # 503: the group is creating its tracking index right now.
    found = es.options(ignore_status=(404, 503)).get(index=cfg.tracking_schema.lower(),
                                                     id=f"trep_commit_seqno:{GROUP}:0").body
    return int(found["_source"]["seqno"]) if found.get("found") else -1


def measure_apply(cfg: ServiceConfig, config: Path, es: Elasticsearch, tail: int, rows: int,
                  timeout: float) -> dict[str, Any]:
    """Run the Elasticsearch group alone from nothing to the THL tail, timed."""
    log = RUN_DIR / f"{cfg.service}-{GROUP}.log"
    started = time.monotonic()
    proc = start_runner(config, log, "--no-extractor", "--consumer", GROUP)
    first: tuple[float, int, float] | None = None
    cpu = 0.0
    now = started
    try:
        while True:
            seqno = applied_seqno(es, cfg)
            now = time.monotonic()
            cpu = cpu_seconds(proc.pid)
            if seqno >= 0 and first is None:
                first = (now, seqno, cpu)
            if seqno >= tail:
                break
            if proc.poll() is not None:
                raise SystemExit(f"consumer group {GROUP} exited; see {log}")
            if now - started > timeout:
                raise SystemExit(f"{GROUP} did not reach seqno {tail} within {timeout} s; "
                                 f"see {log}")
            time.sleep(0.05)
        elapsed = now - started
    finally:
        stop_runner(proc)
    events = tail + 1
    result: dict[str, Any] = {
        "wall_seconds": round(elapsed, 2),
        "rows_per_second": round(rows / elapsed),
        "events_per_second": round(events / elapsed),
        "cpu_seconds": round(cpu, 2),
        "cpu_seconds_per_million_rows": round(cpu / rows * 1e6, 1),
    }
    if first is not None and now > first[0]:
        share = (tail - first[1]) / events  # rows applied between the first and last commit
        result["steady_rows_per_second"] = round(rows * share / (now - first[0]))
        result["steady_cpu_seconds_per_million_rows"] = round(
            (cpu - first[2]) / (rows * share) * 1e6, 1)
        result["startup_seconds"] = round(first[0] - started, 2)
    return result


def documents(es: Elasticsearch, index: str) -> list[tuple[str, dict[str, Any]]]:
    """(``_id``, ``_source``) of every document the applier wrote, in id order."""
    es.indices.refresh(index=index)
    docs = [(hit["_id"], hit["_source"]) for hit in helpers.scan(
        es, index=index, query={"query": {"match_all": {}}}, size=5000)]
    return sorted(docs, key=lambda d: int(d[0]))


def raw_bulk(es: Elasticsearch, source_index: str, docs: list[tuple[str, dict[str, Any]]],
             chunk: int, run: int) -> dict[str, Any]:
    """The same documents into a fresh index with the same mapping, with helpers.bulk."""
    index = f"{source_index}.raw{run}"
    mapping = es.indices.get_mapping(index=source_index).body[source_index]["mappings"]
    mapping.pop("_meta", None)
    es.indices.create(index=index, mappings=mapping)

    def actions() -> Iterator[dict[str, Any]]:
        for doc_id, source in docs:
            yield {"_op_type": "index", "_index": index, "_id": doc_id, "_source": source}

    cpu = time.process_time()
    started = time.monotonic()
    ok, errors = helpers.bulk(es, actions(), chunk_size=chunk, max_chunk_bytes=100 * 2**20,
                              stats_only=True)
    seconds = time.monotonic() - started
    cpu = time.process_time() - cpu
    if errors or ok != len(docs):
        raise SystemExit(f"raw bulk: {ok} written, {errors} errors")
    return {"seconds": round(seconds, 2), "rows_per_second": round(len(docs) / seconds),
            "documents_per_request": chunk, "client_cpu_seconds": round(cpu, 2),
            "client_cpu_seconds_per_million_rows": round(cpu / len(docs) * 1e6, 1)}


def forget_apply(cfg: ServiceConfig, es: Elasticsearch, index: str) -> None:
    """Delete the group's index and position: the next run applies everything again."""
    es.indices.delete(index=index)
    es.delete(index=cfg.tracking_schema.lower(), id=f"trep_commit_seqno:{GROUP}:0")


def cleanup(cfg: ServiceConfig, config: Path, schema: str, es: Elasticsearch) -> None:
    """Remove what the benchmark created: schemas, indices, THL topic, group, znodes."""
    conn = _mysql(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {schema}")
        cur.execute(f"DROP DATABASE IF EXISTS {cfg.tracking_schema}")
    conn.close()
    for index in (f"{schema}.*", cfg.tracking_schema.lower()):
        es.indices.delete(index=index, ignore_unavailable=True, allow_no_indices=True)
    admin = AdminClient({"bootstrap.servers": cfg.kafka.bootstrap_servers})
    futures = {**admin.delete_topics([cfg.thl_topic], operation_timeout=30),
               **admin.delete_consumer_groups([cfg.group_id(GROUP)], request_timeout=30)}
    for name, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:  # a group that never committed does not exist: fine
            print(f"cleanup: {name}: {exc}", file=sys.stderr)
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s)
    try:
        zk.delete(f"{cfg.zookeeper.root.rstrip('/')}/{cfg.service}", recursive=True)
    except NoNodeError:
        pass
    finally:
        zk.stop()
        zk.close()
    config.unlink(missing_ok=True)


def main() -> int:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000, help="rows in the THL")
    parser.add_argument("--txn-rows", type=int, default=10,
                        help="rows per source transaction (one THL event each)")
    parser.add_argument("--raw-chunk", type=int, default=0,
                        help="documents per raw bulk request (0: the applier's rows per "
                             "block)")
    parser.add_argument("--runs", type=int, default=2,
                        help="apply + raw bulk pairs, alternating (the machine's load varies)")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true",
                        help="leave the schema, indices, topic and znodes for inspection")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench" / "results" / "elasticsearch.json")
    args = parser.parse_args()

    service = f"esb{uuid.uuid4().hex[:6]}"
    schema = f"ebench_{service}"
    config = write_config(service, schema)
    cfg = load_config(config)
    es = Elasticsearch(es_url(), request_timeout=300)
    rows = make_rows(args.rows)
    # The applier's default block limits (what the group runs with).
    block = build_applier(cfg.consumers[GROUP].target, ApplierContext(cfg, GROUP)
                          ).capabilities.block
    try:
        prepare(cfg, schema)
        print(f"service {service}: extracting {args.rows} rows in transactions of "
              f"{args.txn_rows} rows ...", flush=True)
        tail, fill_seconds = fill_thl(cfg, config, schema, rows, args.txn_rows)
        index = f"{schema}.items"
        chunk = args.raw_chunk or min(block.rows or args.rows, block.events * args.txn_rows)
        applies, raws = [], []
        docs: list[tuple[str, dict[str, Any]]] = []
        for run in range(args.runs):
            if run:
                forget_apply(cfg, es, index)
            print(f"run {run + 1}: applying with group {GROUP} ...", flush=True)
            applies.append(measure_apply(cfg, config, es, tail, args.rows, args.timeout))
            docs = docs or documents(es, index)
            if len(docs) != args.rows:
                raise SystemExit(f"{index} holds {len(docs)} documents, not {args.rows}")
            print(f"run {run + 1}: raw bulk of the same {len(docs)} documents, {chunk} per "
                  "request ...", flush=True)
            raws.append(raw_bulk(es, index, docs, chunk, run))
    finally:
        if not args.keep:
            cleanup(cfg, config, schema, es)
        es.close()
    # Rates over all runs: total rows over total seconds.
    steady = args.rows * len(applies) / sum(
        args.rows / a.get("steady_rows_per_second", a["rows_per_second"]) for a in applies)
    raw_rate = args.rows * len(raws) / sum(r["seconds"] for r in raws)
    cpu = sum(a.get("steady_cpu_seconds_per_million_rows", a["cpu_seconds_per_million_rows"])
              for a in applies) / len(applies)
    result = {
        "benchmark": "elasticsearch-apply",
        "rows": args.rows, "rows_per_transaction": args.txn_rows,
        "events": tail + 1,
        "thl_fill_seconds": round(fill_seconds, 2),
        "steady_rows_per_second": round(steady),
        "steady_cpu_seconds_per_million_rows": round(cpu, 1),
        "raw_bulk_rows_per_second": round(raw_rate),
        "steady_ratio_to_raw_bulk": round(steady / raw_rate, 3),
        "goal_ratio": 0.7,
        "runs": [{"apply": a, "raw_bulk": r,
                  "steady_ratio_to_raw_bulk": round(
                      a.get("steady_rows_per_second", a["rows_per_second"])
                      / r["rows_per_second"], 3)}
                 for a, r in zip(applies, raws, strict=True)],
        "note": "apply: trep-run consuming the THL from Kafka, decoding Avro, collapsing "
                "blocks and writing bulks plus one position document per block "
                f"(default limits: {block.events} events / {block.rows} rows per block); "
                "wall rates include process start-up, steady rates run from the first "
                "position write to the last; CPU: the consumer process. raw bulk: "
                "elasticsearch.helpers.bulk of the documents the applier wrote, into an "
                "index with the same mapping, one request at a time, right after each "
                "apply run. Totals: rows over seconds across runs.",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
