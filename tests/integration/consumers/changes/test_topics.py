"""Change topics as Kafka sees them: compaction keeps the last value per key and drops deleted
keys after their tombstones (forced with small segment settings); keys land on the partition
Java's default partitioner picks; a table without a key gets ``cleanup.policy=delete``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from confluent_kafka.admin import AdminClient

from consumers.changes.readback import messages
from thl_topics.admin import describe_configs

from .conftest import ChangeService

PARTITIONS = 3


def java_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (what Java's default partitioner hashes keys with)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % partitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


def _raw(bootstrap: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    """(partition, key, value) of every committed record left in ``topic``."""
    return [(msg.partition() or 0, msg.key(), msg.value())
            for msg in messages({"bootstrap.servers": bootstrap}, [topic])]


def test_compaction_keeps_the_last_value_per_key_and_drops_deleted_keys(
        make_service: Callable[..., ChangeService]) -> None:
    svc = make_service({"g": {
        "envelope": "debezium", "format": "json", "json_schemas": False,
        "partitions": PARTITIONS,
        # Small segments and an eager cleaner, so the test sees compaction within a minute;
        # nothing younger than 10 s is compacted, so the test reads every record first.
        "topic_config": {"segment.ms": "200", "min.cleanable.dirty.ratio": "0.001",
                         "delete.retention.ms": "100", "min.compaction.lag.ms": "10000"}}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.kv (id INT PRIMARY KEY, v VARCHAR(20))",
            f"CREATE TABLE {s}.loose (a INT, b VARCHAR(20))")
    svc.start()
    svc.src(f"INSERT INTO {s}.kv VALUES (%s, %s)", params=[(i, "v0") for i in range(60)],
            many=True)
    for n in range(1, 4):
        svc.src(f"UPDATE {s}.kv SET v = 'v{n}'")
    svc.src(f"DELETE FROM {s}.kv WHERE id < 15")
    svc.src(f"INSERT INTO {s}.loose VALUES (1, 'x'), (1, 'x')")
    svc.wait_source_applied()
    topic = svc.topic("kv")
    admin = AdminClient({"bootstrap.servers": svc.bootstrap})
    assert describe_configs(admin, topic)["cleanup.policy"] == "compact"
    assert describe_configs(admin, svc.topic("loose"))["cleanup.policy"] == "delete"
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert len(meta.partitions) == PARTITIONS

    before = _raw(svc.bootstrap, topic)
    assert len(before) == 60 * 4 + 15 * 2  # creates, 3 updates each, deletes + tombstones
    # Keys land where Java's default partitioner puts them.
    assert all(p == java_partition(k, PARTITIONS) for p, k, _ in before if k is not None)

    deadline = time.monotonic() + 180
    extra = 1000
    while True:
        # New keys keep rolling segments (the active one is never cleaned) and make the
        # log dirty again, so the cleaner passes twice: values, then tombstones.
        time.sleep(1)
        svc.src(f"INSERT INTO {s}.kv VALUES (%s, 'new')",
                params=[(extra + i,) for i in range(6)], many=True)
        extra += 6
        left = _raw(svc.bootstrap, topic)
        keys = Counter(k for _, k, _ in left)
        deleted_left = [k for _, k, v in left if v is None]
        if max(keys.values()) == 1 and not deleted_left:
            break
        assert time.monotonic() < deadline, (
            f"not compacted in 180 s: {sum(n > 1 for n in keys.values())} keys with several "
            f"records, {len(deleted_left)} tombstones")
    survivors = {k: v for _, k, v in left}
    for i in range(60):
        key = f'{{"id":{i}}}'.encode()
        if i < 15:
            assert key not in survivors  # deleted, tombstone gone too
        else:
            value = survivors[key]
            assert value is not None and b'"after":{"id":%d,"v":"v3"}' % i in value


def test_a_table_meeting_a_topic_of_an_earlier_session_is_refused(
        make_service: Callable[..., ChangeService]) -> None:
    """`a b` and `a_b` both make topic `<service>.<schema>.a_b`: the second is refused even
    when the first was written by an earlier process (the layouts topic remembers it), and
    a table renamed away frees its topic's name."""
    svc = make_service({"g": {"envelope": "debezium", "format": "json"}})
    s = svc.schema
    svc.src(f"CREATE TABLE {s}.`a b` (id INT PRIMARY KEY)",
            f"CREATE TABLE {s}.a_b (id INT PRIMARY KEY)",
            f"CREATE TABLE {s}.c_d (id INT PRIMARY KEY)")
    svc.start()
    svc.src(f"INSERT INTO {s}.`a b` VALUES (1)", f"INSERT INTO {s}.c_d VALUES (1)")
    svc.wait_source_applied()
    svc.src(f"RENAME TABLE {s}.c_d TO {s}.moved")
    svc.wait_source_applied()
    svc.stop()
    svc.start()
    svc.src(f"CREATE TABLE {s}.`c d` (id INT PRIMARY KEY)",
            f"INSERT INTO {s}.`c d` VALUES (7)")  # c_d's topic is free again
    seqno = svc.wait_source_applied()
    svc.src(f"INSERT INTO {s}.a_b VALUES (2)")
    status = svc.wait_state("g", "OFFLINE:ERROR")
    assert status["pendingErrorSeqno"] == seqno + 1, status
    message = status["pendingExceptionMessage"]
    assert f"{s}.a b" in message and f"{s}.a_b" in message, message
