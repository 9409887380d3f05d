"""Change-topic benchmark: THL fan-out into per-table topics, beside a plain producer.

``make bench`` runs it against the local stack (Kafka, ZooKeeper, the Apicurio registry).
Method, on a fresh service:

1. write a THL of ``--transactions`` events of ``--txn-rows`` row changes each straight into
   ``thl.<service>`` with the project's THL producer (the sysbench-like table of PERF.md:
   ``id INT PK, k INT, c CHAR(120), pad CHAR(60)``; 80 % inserts, 15 % updates, 5 % deletes);
2. for each format (``--formats``: Debezium envelope in Avro through the registry, and in
   JSON with Connect's schema block), start that consumer group alone
   (``trep-run --no-extractor --consumer NAME``, 3 partitions per topic, blocks of 100
   events) and time it from process start until its status shows the THL's last seqno;
   CPU seconds of the process from /proc;
3. as the reference, read back every record that group wrote (key, value and headers, as
   bytes) and write the same records with a plain confluent-kafka ``Producer`` (idempotent,
   acks=all, lz4, the same partitioner) in one process: what Kafka and librdkafka cost alone.

Reported per format: row changes/s (wall, including start-up), records written, CPU seconds
per million row changes, and the same for the plain producer. Not a test: nothing asserted.
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import Any

import click
import options
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from group_timing import time_group
from results import write_result
from service import stack_servers, write_config

from consumers.changes.readback import messages
from replicator.control import ComponentNodes
from replicator.zk import connect
from stack.services.apicurio import service as apicurio
from stack.settings import RUN_DIR
from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.client import ClientSettings
from thl_topics.event import ColumnSpec, DataItem, RowAction, RowChange, ThlEvent, ThlValue
from thl_topics.producer import ThlProducer
from trep.config import ServiceConfig, load_config

Record = tuple[Any, Any, Any, Any]

SCHEMA = "sbtest"
SPECS = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "k", "INT"),
         ColumnSpec(3, "c", "CHAR", length=480, charset="utf8mb4"),
         ColumnSpec(4, "pad", "CHAR", length=240, charset="utf8mb4")]


def _text(rng: random.Random, n: int) -> str:
    return "-".join(f"{rng.randrange(10**11):011d}" for _ in range(n // 12 + 1))[:n]


def make_events(transactions: int, txn_rows: int, seed: int) -> list[ThlEvent]:
    """The synthetic THL: sbtest rows, 80 % inserts, 15 % updates, 5 % deletes."""
    rng = random.Random(seed)
    live: list[int] = []
    next_id = 1
    events = []
    for seqno in range(transactions):
        data: list[DataItem] = []
        for _ in range(txn_rows):
            pick = rng.random()
            if pick < 0.80 or len(live) < 10:
                row: list[ThlValue] = [next_id, rng.randrange(10**6), _text(rng, 120),
                                  _text(rng, 60)]
                live.append(next_id)
                next_id += 1
                data.append(RowChange(RowAction.INSERT, SCHEMA, "sbtest1", SPECS, [],
                                      [row], []))
            elif pick < 0.95:
                rid = rng.choice(live)
                before: list[ThlValue] = [rid, 1, "c", "pad"]
                after: list[ThlValue] = [rid, rng.randrange(10**6), _text(rng, 120), "pad"]
                data.append(RowChange(RowAction.UPDATE, SCHEMA, "sbtest1", SPECS, SPECS,
                                      [after], [before]))
            else:
                rid = live.pop(rng.randrange(len(live)))
                data.append(RowChange(RowAction.DELETE, SCHEMA, "sbtest1", [], SPECS, [],
                                      [[rid, 1, "c", "pad"]]))
        events.append(ThlEvent(seqno=seqno, epoch=0, source_id="bench",
                               event_id=f"bench-bin.000001:{seqno * 1000:016d};0",
                               shard_id=SCHEMA, tstamp=1_700_000_000_000_000 + seqno,
                               metadata={"mysql_server_id": "1", "gtid": f"0-1-{seqno + 1}"},
                               data=data))
    return events


def fill_thl(kafka: ClientSettings, topic: str, events: list[ThlEvent]) -> float:
    """Publish the events, 100 per Kafka transaction; seconds taken."""
    ensure_thl_topic(AdminClient(kafka), ThlTopicSpec(topic))
    started = time.monotonic()
    producer = ThlProducer(kafka, topic, f"bench-{topic}")
    for i, event in enumerate(events):
        producer.publish(event)
        if i % 100 == 99:
            producer.commit()
    producer.commit()
    producer.close()
    return time.monotonic() - started


def write_service(service: str, formats: list[str]) -> Path:
    """One group per format: the Debezium envelope in Avro (through the registry) or JSON,
    3 partitions per topic, blocks of 100 events."""
    groups = {f"dbz_{f}": {"type": "changes", "envelope": "debezium", "format": f,
                           "partitions": 3, "topic": f"{{service}}.{f}.{{schema}}.{{table}}",
                           **({"schema_registry": {"url": apicurio().ccompat_url}}
                              if f == "avro" else {})} for f in formats}
    servers = stack_servers()
    return write_config(RUN_DIR / f"{service}.yml", service, {
        "kafka": servers["kafka"], "zookeeper": servers["zookeeper"],
        "consumers": {g: {"target": t, "block_commit_events": 100} for g, t in groups.items()},
    })


def measure_group(cfg: ServiceConfig, config: Path, group: str, tail: int,
                  timeout: float) -> dict[str, Any]:
    """Run one group alone until its status shows ``tail`` applied; wall and CPU seconds."""
    log = RUN_DIR / f"{cfg.service}-{group}.log"
    zk = connect(cfg.zookeeper.hosts, 10)
    nodes = ComponentNodes(zk, "/tungsten", cfg.service, f"consumers/{group}")

    def applied() -> int:
        status = nodes.status() or {}
        seqno = int(status.get("appliedLastSeqno", -1))
        if seqno < tail and status.get("state") == "OFFLINE:ERROR":
            raise SystemExit(f"{group} failed: {status}; see {log}")
        return seqno

    try:
        run = time_group(config, log, group, applied, tail, timeout)
    finally:
        zk.stop()
        zk.close()
    return {"wall_seconds": round(run.seconds, 2), "cpu_seconds": round(run.cpu, 2)}


def read_back(kafka: ClientSettings, topic: str) -> list[Record]:
    """(partition, key, value, headers) of every committed record of ``topic``."""
    return [(msg.partition(), msg.key(), msg.value(), msg.headers())
            for msg in messages(kafka, [topic])]


def plain_producer(kafka: ClientSettings, topic: str, records: list[Record],
                   partitions: int) -> dict[str, float]:
    """The same records through a plain confluent-kafka producer: wall and CPU seconds."""
    admin = AdminClient(kafka)  # kept: its futures need it alive
    admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                  replication_factor=1)])[topic].result(30)
    producer = Producer({**kafka, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "compression.type": "lz4",
                         "partitioner": "murmur2_random"})
    cpu0, wall0 = time.process_time(), time.monotonic()
    for _, key, value, headers in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(120)
    return {"wall_seconds": round(time.monotonic() - wall0, 2),
            "cpu_seconds": round(time.process_time() - cpu0, 2)}


def fan_out(cfg: ServiceConfig, config: Path, fmt: str, rows: int, tail: int,
            timeout: float) -> dict[str, Any]:
    """One format's group, then the plain producer on the records it wrote."""
    group = f"dbz_{fmt}"
    print(f"fan-out with {group} ...", flush=True)
    run = measure_group(cfg, config, group, tail, timeout)
    topic = f"{cfg.service}.{fmt}.{SCHEMA}.sbtest1"
    records = read_back(cfg.kafka.client(), topic)
    print(f"plain producer, the same {len(records)} records ...", flush=True)
    plain = plain_producer(cfg.kafka.client(), f"{topic}.plain", records, 3)
    return {
        "format": f"debezium/{fmt}", "row_changes": rows, "records": len(records),
        **run,
        "row_changes_per_second": round(rows / run["wall_seconds"]),
        "cpu_seconds_per_million_rows": round(run["cpu_seconds"] * 1e6 / rows, 1),
        "plain_producer": {
            **plain, "records_per_second": round(len(records) / plain["wall_seconds"]),
            "cpu_seconds_per_million_records": round(
                plain["cpu_seconds"] * 1e6 / len(records), 1)},
    }


def delete_topics(cfg: ServiceConfig) -> None:
    """Every topic of the service: the THL, the change topics, the plain copies."""
    admin = AdminClient(cfg.kafka.client())
    service = cfg.service
    names = [t for t in admin.list_topics(timeout=30).topics
             if t.startswith((f"{service}.", f"thl.{service}", f"tungsten_{service}."))]
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            future.result(60)


def benchmark(transactions: int, txn_rows: int, formats: list[str], timeout: float
              ) -> dict[str, Any]:
    """Write a fresh service's THL, then fan it out with each format's group."""
    service = f"cbench{uuid.uuid4().hex[:6]}"
    config = write_service(service, formats)
    cfg = load_config(config)
    rows = transactions * txn_rows
    try:
        print(f"service {service}: writing {transactions} THL events of "
              f"{txn_rows} row changes ...", flush=True)
        fill = fill_thl(cfg.kafka.client(), cfg.thl_topic,
                        make_events(transactions, txn_rows, 7))
        runs = [fan_out(cfg, config, fmt, rows, transactions - 1, timeout)
                for fmt in formats]
    finally:
        delete_topics(cfg)
    return {"benchmark": "changes", "transactions": transactions,
            "rows_per_transaction": txn_rows, "thl_fill_seconds": round(fill, 2),
            "runs": runs,
            "note": "fan-out wall time includes consumer start-up (imports, ZooKeeper, "
                    "Kafka, registry); records = row changes + delete tombstones; the plain "
                    "producer writes those exact bytes, non-transactionally."}


@options.command(__doc__)
@click.option("--transactions", type=int, default=20_000)
@options.txn_rows(help=None)
@click.option("--formats", default="avro,json")
@options.timeout()
@options.out("changes.json")
def main(transactions: int, txn_rows: int, formats: str, timeout: float, out: Path) -> None:
    """Run the benchmark; the JSON goes to ``--out`` and stdout."""
    write_result(benchmark(transactions, txn_rows, options.comma_list(formats), timeout), out)


if __name__ == "__main__":
    main()
