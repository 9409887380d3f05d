"""Reading change topics back the way a data team does: decode, drop replays, materialize.

Records are decoded with confluent-kafka's own ``AvroDeserializer`` (Confluent wire format,
schemas from the registry) or ``json``; values become Python values by the Connect/Debezium
semantic type the schema names (``io.debezium.time.MicroTimestamp`` -> ``datetime`` ...).
``materialize`` folds a table's records into its current rows: the latest value per key for a
table with a key, a replay of creates and deletes for one without; records whose (seqno, row)
a partition already passed are dropped, as the README tells readers to do after a replay.

"The end" of a topic is where it stood when reading began, every transaction decided: a
producer's ``commit_transaction`` returns before the broker has written the commit markers
into the partitions, and until then a ``read_committed`` consumer's end (the last stable
offset) stops short of the records just committed. The reader waits for the markers first.

A consistency check (``trepctl check``) reads a table's range back the same way
(``read_range``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from consumers.changes.records import ROW_HEADER, SEQNO_HEADER
from consumers.check import CheckRange
from consumers.errors import TransientError
from thl_topics.checksum import thl_value_of
from thl_topics.closing import close_consumer
from thl_topics.event import ThlValue

_EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - DATETIME has no zone
_EPOCH_DATE = dt.date(1970, 1, 1)

#: (Connect type, semantic name, parameters) of a field, by source column name.
FieldTypes = dict[str, tuple[str, str | None, dict[str, str]]]


@dataclass(frozen=True)
class Change:
    """One record of a change topic, decoded (``op`` None: a tombstone; ``r``: a provisioned
    row, read like a create)."""

    topic: str
    partition: int
    offset: int
    seqno: int
    row: int
    key: dict[str, Any] | None
    op: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def logical(value: Any, connect_type: str, name: str | None, params: Mapping[str, str]) -> Any:
    """A decoded field value as the Python value its Connect schema means."""
    if value is None:
        return None
    if name == "org.apache.kafka.connect.data.Decimal":
        if isinstance(value, Decimal):
            return value
        scale = int(params.get("scale", "0"))
        if isinstance(value, str):  # JsonConverter's base64 form
            unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
            return Decimal(unscaled).scaleb(-scale)
        return Decimal(value).quantize(Decimal(1).scaleb(-scale))
    if name == "io.debezium.time.Date":
        return _EPOCH_DATE + dt.timedelta(days=value)
    if name == "io.debezium.time.Timestamp":
        return _EPOCH + dt.timedelta(milliseconds=value)
    if name == "io.debezium.time.MicroTimestamp":
        return _EPOCH + dt.timedelta(microseconds=value)
    if name == "io.debezium.time.ZonedTimestamp":
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if name == "io.debezium.time.MicroTime":
        return dt.timedelta(microseconds=value)
    if name == "io.debezium.data.Bits":
        raw = base64.b64decode(value) if isinstance(value, str) else value
        return int.from_bytes(raw, "little")
    if connect_type == "bytes" and isinstance(value, str):
        return base64.b64decode(value)
    if connect_type in ("float32", "float64", "float", "double") and \
            isinstance(value, Decimal):
        return float(value)
    return value


def _avro_fields(record: Mapping[str, Any]) -> tuple[FieldTypes, dict[str, str]]:
    """Field types of an Avro record schema (Confluent's connect.* properties), and the map
    from Avro field name to source column name."""
    types: FieldTypes = {}
    names: dict[str, str] = {}
    for f in record["fields"]:
        column = f.get("tungsten.column", f["name"])
        names[f["name"]] = column
        t = f["type"]
        if isinstance(t, list):
            t = next(x for x in t if x != "null")
        if isinstance(t, str):
            t = {"type": t}
        connect = t.get("connect.type") or {"int": "int32", "long": "int64", "float": "float32",
                                             "double": "float64"}.get(t["type"], t["type"])
        types[column] = (connect, t.get("connect.name"), t.get("connect.parameters", {}))
    return types, names


def _connect_fields(struct: Mapping[str, Any]) -> FieldTypes:
    return {f["field"]: (f["type"], f.get("name"), f.get("parameters", {}))
            for f in struct["fields"]}


class ChangeReader:
    """Reads whole change topics, ``read_committed``, from their start to their end."""

    def __init__(self, kafka: str | Mapping[str, Any], registry_url: str | None = None
                 ) -> None:
        """``kafka``: bootstrap servers, or librdkafka client settings (security too)."""
        self.kafka: dict[str, Any] = {"bootstrap.servers": kafka} if isinstance(kafka, str) \
            else dict(kafka)
        self.registry = SchemaRegistryClient({"url": registry_url}) if registry_url else None
        self._avro = AvroDeserializer(self.registry) if self.registry else None
        self._schemas: dict[int, tuple[FieldTypes, dict[str, str]]] = {}

    def _types_of(self, data: bytes) -> tuple[FieldTypes, dict[str, str]]:
        """(field types, Avro name -> column) of an Avro value, by its schema id."""
        if self.registry is None:
            raise ValueError("an Avro record, and no schema registry to read it with")
        schema_id = int.from_bytes(data[1:5], "big")
        found = self._schemas.get(schema_id)
        if found is None:
            schema = json.loads(self.registry.get_schema(schema_id).schema_str or "{}")
            part = {f["name"]: f["type"] for f in schema["fields"]}
            # Debezium: before's union holds the Value record (after names it); Tungsten:
            # record.
            record = part.get("before") or part["record"]
            if isinstance(record, list):
                record = next(x for x in record if isinstance(x, dict))
            found = self._schemas[schema_id] = _avro_fields(record)
        return found

    def _decode(self, topic: str, data: bytes | None, field: MessageField) -> Any:
        if data is None:
            return None
        if data[:1] == b"\x00" and self._avro is not None:
            return self._avro(data, SerializationContext(topic, field))
        return json.loads(data, parse_float=Decimal)

    def records(self, topics: Iterable[str], timeout: float = 30.0,
                committed: bool = True, span: Span | None = None,
                consumer: Consumer | None = None, admin: AdminClient | None = None
                ) -> Iterator[Change]:
        """Every committed record of ``topics``, partition by partition, in offset order
        (``committed`` False: open and aborted transactions' records too, for diagnosis;
        ``span``, ``consumer`` and ``admin``: as ``messages`` takes them)."""
        for msg in messages(self.kafka, topics, timeout, committed, span, consumer, admin):
            yield self._change(msg)

    def _change(self, msg: Any) -> Change:
        topic = msg.topic()
        headers = dict(msg.headers() or [])
        seqno = int(headers.get(SEQNO_HEADER, b"-1"))
        row = int(headers.get(ROW_HEADER, b"-1"))
        raw_value = msg.value()
        value = self._decode(topic, raw_value, MessageField.VALUE)
        key = self._decode(topic, msg.key(), MessageField.KEY)
        if isinstance(key, dict) and "payload" in key and "schema" in key:
            key = key["payload"]
        if value is None:
            return Change(topic, msg.partition(), msg.offset(), seqno, row, key, None, None,
                          None)
        types: FieldTypes
        names: dict[str, str] = {}
        if raw_value[:1] == b"\x00":
            types, names = self._types_of(raw_value)
        else:
            block = value.get("schema")
            payload = value.get("payload", value) if block is not None else value
            value = payload
            if block is None:
                types = {}
            else:
                fields = {f["field"]: f for f in block["fields"]}
                types = _connect_fields(fields.get("after") or fields["record"])
        return Change(topic, msg.partition(), msg.offset(), seqno, row,
                      self._row(key, types, names) if isinstance(key, dict) else key,
                      *self._envelope(value, types, names))

    def _row(self, data: Mapping[str, Any], types: FieldTypes,
             names: Mapping[str, str]) -> dict[str, Any]:
        out = {}
        for name, value in data.items():
            column = names.get(name, name)
            connect, semantic, params = types.get(column, ("", None, {}))
            out[column] = logical(value, connect, semantic, params)
        return out

    def _envelope(self, value: Mapping[str, Any], types: FieldTypes, names: Mapping[str, str]
                  ) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
        if "op" in value:
            before, after = value.get("before"), value.get("after")
            return (value["op"], self._row(before, types, names) if before else None,
                    self._row(after, types, names) if after else None)
        op = {"INSERT": "c", "UPDATE": "u", "DELETE": "d", "TRUNCATE": "t"}[value["_optype"]]
        if op == "t":
            return op, None, None
        row = self._row(value["record"], types, names)
        return op, (row if op == "d" else None), (None if op == "d" else row)


#: A partition of a topic: (topic, partition).
Where = tuple[str, int]
#: A row's values as a hashable key (``_hashable``).
Image = tuple[tuple[str, Any], ...]


@dataclass
class Span:
    """Where a read of change topics starts and stops, and where it stopped.

    ``start``: the offset to read each partition from (its beginning where none is given).
    ``own``: the first offset of each partition that the reader's own open transaction
    wrote: the read stops there instead of at the partition's end, since a
    ``read_committed`` end cannot pass an open transaction, and waiting for the reader's own
    would wait forever. ``reached``: filled by the read, the offset each partition was read
    up to (where the next read of it starts)."""

    start: Mapping[Where, int] = field(default_factory=dict)
    own: Mapping[Where, int] = field(default_factory=dict)
    reached: dict[Where, int] = field(default_factory=dict)


def reading_consumer(kafka: Mapping[str, Any], committed: bool = True) -> Consumer:
    """A consumer for ``messages``: one may serve many reads (``follow.py`` keeps one, which
    spares each read the connection and the metadata of a new client)."""
    return Consumer({**kafka, "group.id": "change-reader", "enable.auto.commit": False,
                     "isolation.level": "read_committed" if committed else "read_uncommitted",
                     # Reading starts at each partition's beginning, or where a kept fold
                     # stopped: a reset could only skip records silently, so it fails instead.
                     "auto.offset.reset": "error",
                     # A record of a row of many MiB (the producer's max_message_bytes).
                     "receive.message.max.bytes": 256 * 1024 * 1024,
                     "enable.partition.eof": True,
                     # The end is known (the offsets below): a fetch that reached it need
                     # not wait for more records (500 ms by default), which is most of what
                     # a read of a few new records costs (``follow.py``).
                     "fetch.wait.max.ms": 10})


def messages(kafka: Mapping[str, Any], topics: Iterable[str], timeout: float = 30.0,
             committed: bool = True, span: Span | None = None,
             consumer: Consumer | None = None, admin: AdminClient | None = None
             ) -> Iterator[Message]:
    """Every committed record of ``topics`` as Kafka returns it, from each partition's
    beginning to its end as it stands now, every transaction decided (``committed`` False:
    open and aborted transactions' records too, for diagnosis; ``span``: from and up to
    where, and where the read ended). ``consumer`` (from ``reading_consumer``) and ``admin``:
    clients to read with, kept by the caller (unassigned after the read); new ones
    otherwise."""
    span = span or Span()
    kept = consumer is not None
    if consumer is None:
        consumer = reading_consumer(kafka, committed)
    try:
        topics = list(topics)
        # One topic: its metadata only (a kept client asks again for every read).
        meta = consumer.list_topics(topics[0] if len(topics) == 1 else None, timeout=timeout)
        parts = [TopicPartition(t, p, span.start.get((t, p), OFFSET_BEGINNING))
                 for t in topics if t in meta.topics for p in sorted(meta.topics[t].partitions)]
        if not parts:
            return
        ends = wait_decided(kafka, parts, timeout, span.own, admin) if committed else {}
        consumer.assign(parts)
        left = {(p.topic, p.partition) for p in parts}
        while left:
            msg = consumer.poll(timeout)
            if msg is None:
                raise TimeoutError(f"no end of {sorted(left)} within {timeout} s")
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    where = (msg.topic() or "", msg.partition() or 0)
                    at = msg.offset()
                    # An end short of where the partition stood when reading began is no
                    # end: the records up to there are decided, so keep reading (or time
                    # out, loudly) rather than stop before some of them.
                    if at is None or at >= ends.get(where, 0):
                        left.discard(where)
                        if at is not None:
                            span.reached[where] = at
                    continue
                raise RuntimeError(f"reading change topics: {err.str()}")
            yield msg
    finally:
        if kept:
            consumer.unassign()
        else:
            close_consumer(consumer, "change topics read back")


#: The least time one ListOffsets request is given, whatever the caller's timeout.
REQUEST_TIMEOUT_S = 30.0


def wait_decided(kafka: Mapping[str, Any], parts: list[TopicPartition],
                 timeout: float, own: Mapping[Where, int] | None = None,
                 admin: AdminClient | None = None) -> dict[Where, int]:
    """Until every partition's last stable offset reaches the high watermark it has now:
    the transactions committed (or aborted) before this call have their markers, so a
    ``read_committed`` read to the end sees them. Those high watermarks, by (topic,
    partition); where the caller's own open transaction wrote (``own``: its first offset
    there), that offset instead: the records before it are decided, the caller's own are
    not and will not be until it commits. Raises TimeoutError naming a partition whose
    transaction stays open (a producer that died mid-transaction holds its partitions until
    its transaction times out or its successor fences it). ``admin``: a client to ask with
    (a new one otherwise)."""
    admin = admin or AdminClient(dict(kafka))
    # ``timeout`` is how long a transaction may stay open; one ListOffsets round trip gets
    # at least REQUEST_TIMEOUT_S (a busy broker can take seconds to answer one).
    request = max(timeout, REQUEST_TIMEOUT_S)
    ends = _offsets(admin, parts, IsolationLevel.READ_UNCOMMITTED, request)
    for where, first in (own or {}).items():
        if where in ends:
            ends[where] = min(ends[where], first)
    deadline = time.monotonic() + timeout
    while True:
        stable = _offsets(admin, parts, IsolationLevel.READ_COMMITTED, request)
        open_ = {where: (stable[where], end) for where, end in ends.items()
                 if stable[where] < end}
        if not open_:
            return ends
        if time.monotonic() > deadline:
            (topic, partition), (lso, end) = sorted(open_.items())[0]
            raise TimeoutError(
                f"{topic} partition {partition}: a transaction is still open at offset "
                f"{lso} (high watermark {end}) after {timeout} s; the records after it are "
                f"not readable until its producer commits or aborts it")
        time.sleep(0.02)


def _offsets(admin: AdminClient, parts: list[TopicPartition], isolation: IsolationLevel,
             timeout: float) -> dict[tuple[str, int], int]:
    """The end offset of each partition: its high watermark (READ_UNCOMMITTED) or its last
    stable offset (READ_COMMITTED)."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    try:
        futures = admin.list_offsets({TopicPartition(p.topic, p.partition): latest
                                      for p in parts}, isolation_level=isolation,
                                     request_timeout=timeout)
        return {(tp.topic, tp.partition): int(f.result(timeout).offset)
                for tp, f in futures.items()}
    except KafkaException as exc:
        raise RuntimeError(f"reading change topics' end offsets: {exc}") from exc


def _hashable(row: Mapping[str, Any]) -> Image:
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


class TopicFold:
    """A table's current rows folded from its records (in each partition's offset order),
    one record at a time, so that a fold can be kept and later records added to it
    (``consumers.changes.follow``).

    Records at or below the (seqno, row) a partition already passed are replays and are
    dropped; tombstones only remove a key that a delete removed already; a truncate (op
    ``t``, sent to every partition when a keyless table is provisioned again) empties what
    its partition held so far.
    """

    def __init__(self, keyed: bool) -> None:
        self.keyed = keyed
        self._latest: dict[Where, dict[Image, dict[str, Any]]] = {}
        self._bags: dict[Where, Counter[Image]] = {}
        self._images: dict[Image, dict[str, Any]] = {}
        self._passed: dict[Where, tuple[int, int]] = {}

    def add(self, c: Change) -> None:
        if c.op is None:
            return
        mark = (c.seqno, c.row)
        where = (c.topic, c.partition)
        if where in self._passed and mark <= self._passed[where]:
            return
        self._passed[where] = mark
        if c.op == "t":
            self._latest.pop(where, None)
            self._bags.pop(where, None)
        elif self.keyed:
            key = _hashable(c.key or {})
            if c.op == "d":
                self._latest.setdefault(where, {}).pop(key, None)
            elif c.after is not None:
                self._latest.setdefault(where, {})[key] = c.after
        else:
            bag = self._bags.setdefault(where, Counter())
            if c.before is not None and c.op in ("u", "d"):
                bag[_hashable(c.before)] -= 1
            if c.after is not None:
                h = _hashable(c.after)
                bag[h] += 1
                self._images[h] = c.after

    def rows(self) -> list[dict[str, Any]]:
        """The rows the records added so far fold into."""
        if self.keyed:
            return [row for part in self._latest.values() for row in part.values()]
        total: Counter[Image] = Counter()
        for bag in self._bags.values():
            total.update(bag)
        negative = [h for h, n in total.items() if n < 0]
        if negative:
            raise ValueError(f"{len(negative)} keyless row(s) deleted more often than created")
        return [self._images[h] for h, n in total.items() for _ in range(n)]


def materialize(changes: Iterable[Change], keyed: bool) -> list[dict[str, Any]]:
    """A table's current rows from its records (``TopicFold``)."""
    fold = TopicFold(keyed)
    for c in changes:
        fold.add(c)
    return fold.rows()


def read_range(kafka: Mapping[str, Any], registry: str | None, topic: str, check: CheckRange,
               timeout: float, target: str, own: Mapping[Where, int] | None = None
               ) -> Iterator[list[ThlValue]]:
    """The rows a data team would fold ``topic`` into, in a checked key range, as THL values
    (consumers.check). Reads the whole topic: a check of change topics costs what a full
    materialization costs. ``own``: where the caller's open transaction began writing to
    the topic's partitions (``Span``)."""
    try:
        # A topic that does not exist (yet) reads as no records: no rows.
        reader = ChangeReader(kafka, registry)
        rows = materialize(reader.records([topic], timeout, span=Span(own=own or {})),
                           bool(check.key))
    except (KafkaException, TimeoutError, RuntimeError) as exc:
        # Kafka away, or a transaction of another producer still open in the topic:
        # the check block rolls back and the check runs again.
        raise TransientError(f"{target}: reading {topic} back for a consistency "
                             f"check: {exc}") from exc
    names = [c.name for c in check.specs]
    for row in rows:
        values = [thl_value_of(spec, row.get(spec.name)) for spec in check.specs]
        if check.key and not check.contains([values[names.index(k)] for k in check.key]):
            continue
        yield values
