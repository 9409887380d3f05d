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

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import options
from elasticsearch import Elasticsearch, helpers
from group_timing import pick, time_group
from items import DDL, extract_items, make_rows
from results import write_result
from service import drop_schemas, extractor, remove_service, seed_start, stack_servers, write_config

from consumers.registry import ApplierContext, build_applier
from stack.settings import RUN_DIR, port
from trep.config import ServiceConfig, load_config

GROUP = "es"
SOURCE_ID = "es-bench"
TABLE_DDL = DDL + " DEFAULT CHARSET=utf8mb4"

Documents = list[tuple[str, dict[str, Any]]]


def es_url() -> str:
    return f"http://127.0.0.1:{port('elasticsearch')}"


def write_service(service: str, schema: str) -> Path:
    return write_config(RUN_DIR / f"{service}.yml", service, {
        **stack_servers(),
        "extractor": extractor(service, 9500, 400, [schema], SOURCE_ID),
        "consumers": {GROUP: {"target": {"type": "elasticsearch", "hosts": [es_url()]}}},
    })


def prepare(cfg: ServiceConfig, schema: str) -> None:
    """The table on the source, and the extractor's start right after the DDL."""
    seed_start(port("mariadb-source"), cfg.tracking_schema, SOURCE_ID,
               [f"CREATE DATABASE {schema}", TABLE_DDL.format(table=f"{schema}.items")])


def applied_seqno(es: Elasticsearch, cfg: ServiceConfig) -> int:
    """The group's stored seqno (-1: nothing committed yet)."""
    # 503: the group is creating its tracking index right now.
    found = es.options(ignore_status=(404, 503)).get(index=cfg.tracking_schema.lower(),
                                                     id=f"trep_commit_seqno:{GROUP}:0").body
    return int(found["_source"]["seqno"]) if found.get("found") else -1


def measure_apply(cfg: ServiceConfig, config: Path, es: Elasticsearch, tail: int, rows: int,
                  timeout: float) -> dict[str, Any]:
    """Run the Elasticsearch group alone from nothing to the THL tail, timed."""
    run = time_group(config, RUN_DIR / f"{cfg.service}-{GROUP}.log", GROUP,
                     lambda: applied_seqno(es, cfg), tail, timeout)
    return pick(run.figures(rows, tail), "wall_seconds", "rows_per_second",
                "events_per_second", "cpu_seconds", "cpu_seconds_per_million_rows",
                "steady_rows_per_second", "steady_cpu_seconds_per_million_rows",
                "startup_seconds")


def documents(es: Elasticsearch, index: str) -> Documents:
    """(``_id``, ``_source``) of every document the applier wrote, in id order."""
    es.indices.refresh(index=index)
    docs = [(hit["_id"], hit["_source"]) for hit in helpers.scan(
        es, index=index, query={"query": {"match_all": {}}}, size=5000)]
    return sorted(docs, key=lambda d: int(d[0]))


def raw_bulk(es: Elasticsearch, source_index: str, docs: Documents,
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
    drop_schemas(port("mariadb-source"), [schema, cfg.tracking_schema])
    for index in (f"{schema}.*", cfg.tracking_schema.lower()):
        es.indices.delete(index=index, ignore_unavailable=True, allow_no_indices=True)
    remove_service(cfg, config)


def alternate(cfg: ServiceConfig, config: Path, es: Elasticsearch, index: str, tail: int,
              rows: int, chunk: int, runs: int, timeout: float
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``runs`` apply runs, each followed by the raw bulk of the documents it wrote."""
    applies, raws = [], []
    docs: Documents = []
    for run in range(runs):
        if run:
            forget_apply(cfg, es, index)
        print(f"run {run + 1}: applying with group {GROUP} ...", flush=True)
        applies.append(measure_apply(cfg, config, es, tail, rows, timeout))
        docs = docs or documents(es, index)
        if len(docs) != rows:
            raise SystemExit(f"{index} holds {len(docs)} documents, not {rows}")
        print(f"run {run + 1}: raw bulk of the same {len(docs)} documents, {chunk} per "
              "request ...", flush=True)
        raws.append(raw_bulk(es, index, docs, chunk, run))
    return applies, raws


def summary(rows: int, applies: list[dict[str, Any]], raws: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """Rates over all runs (total rows over total seconds), and each run's ratio."""
    steady = rows * len(applies) / sum(
        rows / a.get("steady_rows_per_second", a["rows_per_second"]) for a in applies)
    raw_rate = rows * len(raws) / sum(r["seconds"] for r in raws)
    cpu = sum(a.get("steady_cpu_seconds_per_million_rows", a["cpu_seconds_per_million_rows"])
              for a in applies) / len(applies)
    return {
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
    }


def benchmark(rows: int, txn_rows: int, raw_chunk: int, runs: int, timeout: float,
              keep: bool) -> dict[str, Any]:
    """Fill a fresh service's THL, then alternate apply runs and raw bulks."""
    service = f"esb{uuid.uuid4().hex[:6]}"
    schema = f"ebench_{service}"
    config = write_service(service, schema)
    cfg = load_config(config)
    es = Elasticsearch(es_url(), request_timeout=300)
    data = make_rows(rows)
    # The applier's default block limits (what the group runs with).
    block = build_applier(cfg.consumers[GROUP].target, ApplierContext(cfg, GROUP)
                          ).capabilities.block
    try:
        prepare(cfg, schema)
        tail, fill_seconds = extract_items(
            cfg, config, RUN_DIR / f"{service}-extractor.log", port("mariadb-source"),
            [f"{schema}.items"], data, txn_rows)
        chunk = raw_chunk or min(block.rows or rows, block.events * txn_rows)
        applies, raws = alternate(cfg, config, es, f"{schema}.items", tail, rows, chunk,
                                  runs, timeout)
    finally:
        if not keep:
            cleanup(cfg, config, schema, es)
        es.close()
    return {
        "benchmark": "elasticsearch-apply",
        "rows": rows, "rows_per_transaction": txn_rows,
        "events": tail + 1,
        "thl_fill_seconds": round(fill_seconds, 2),
        **summary(rows, applies, raws),
        "note": "apply: trep-run consuming the THL from Kafka, decoding Avro, collapsing "
                "blocks and writing bulks plus one position document per block "
                f"(default limits: {block.events} events / {block.rows} rows per block); "
                "wall rates include process start-up, steady rates run from the first "
                "position write to the last; CPU: the consumer process. raw bulk: "
                "elasticsearch.helpers.bulk of the documents the applier wrote, into an "
                "index with the same mapping, one request at a time, right after each "
                "apply run. Totals: rows over seconds across runs.",
    }


@options.command(__doc__)
@options.rows(200_000)
@options.txn_rows()
@click.option("--raw-chunk", type=int, default=0,
              help="documents per raw bulk request (0: the applier's rows per block)")
@click.option("--runs", type=int, default=2,
              help="apply + raw bulk pairs, alternating (the machine's load varies)")
@options.timeout()
@options.keep("leave the schema, indices, topic and znodes for inspection")
@options.out("elasticsearch.json")
def main(rows: int, txn_rows: int, raw_chunk: int, runs: int, timeout: float, keep: bool,
         out: Path) -> None:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    write_result(benchmark(rows, txn_rows, raw_chunk, runs, timeout, keep), out)


if __name__ == "__main__":
    main()
