"""The THL as data, for data teams: row changes of a seqno range, or of the live tail.

```python
from thl_topics.row_changes import ChangeReader

with ChangeReader("127.0.0.1:9092", "thl.shop") as thl:
    for change in thl.range(1000, 2000):           # seqnos 1000 .. 1999 (half-open)
        print(change.seqno, change.op, change.table, change.key, change.after)
    frame = thl.to_pandas(1000, 2000, tables=["shop.orders"])
    for change in thl.follow(2000):                 # everything from 2000 on, as it comes
        ...
```

A row change is (seqno, epoch, commit time, schema, table, op, key, before, after, row):
``op`` is INSERT/UPDATE/DELETE, ``key`` the primary key values (of the after image, of the
before image for a DELETE), ``before``/``after`` the row images as dicts of typed Python
values (``values.from_thl``: Decimal, datetime, bytes ...), ``row`` the change's ordinal
inside its seqno. Statements (DDL) are not row changes and are left out.

The THL is gapless: a range that finds a seqno missing, or ends past the THL's tail, raises
``ThlGapError`` instead of returning a partial answer. ``spark_changes`` reads a range with
Spark's Kafka source, decoding in the executors, for ranges too large for one process.
"""

from __future__ import annotations

import base64
import datetime as dt
import fnmatch
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from thl_topics.chunks import Joiner
from thl_topics.client import client_settings
from thl_topics.codec import ThlCodec
from thl_topics.errors import ThlError
from thl_topics.event import RowAction, RowChange, ThlEvent
from thl_topics.reader import ThlReader, ThlRecord, is_chunk_key
from thl_topics.values import format_datetime, format_time, from_thl

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

#: The columns of a change in a DataFrame or an exported file, in order.
COLUMNS = ("seqno", "epoch", "commit_time", "schema", "table", "op", "row", "key", "before",
           "after")
#: The same as a Spark schema (images as JSON text).
SPARK_SCHEMA = ("seqno BIGINT, epoch BIGINT, commit_time TIMESTAMP, schema STRING, "
                "table STRING, op STRING, row BIGINT, key STRING, before STRING, after STRING")


class ThlGapError(ThlError):
    """The THL does not hold every seqno of the range asked for."""


@dataclass(frozen=True)
class Change:
    """One row change of the THL."""

    seqno: int
    epoch: int
    #: Source commit time (UTC).
    commit_time: dt.datetime
    schema: str
    table: str
    op: str
    #: Ordinal of this row change inside its seqno (across fragments).
    row: int
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def record(self) -> dict[str, Any]:
        """Plain values for a file or a DataFrame: images as JSON text (``json_value``)."""
        return {"seqno": self.seqno, "epoch": self.epoch, "commit_time": self.commit_time,
                "schema": self.schema, "table": self.table, "op": self.op, "row": self.row,
                "key": _json(self.key), "before": _json(self.before),
                "after": _json(self.after)}


def json_value(value: Any) -> Any:
    """A typed value in JSON: exact numbers as text where a double would round them
    (DECIMAL, integers beyond 2^53), bytes as base64, times in MySQL's text forms."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value if abs(value) < (1 << 53) else str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return format_datetime(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return format_time(value)
    return value


def _json(image: Mapping[str, Any] | None) -> str | None:
    if image is None:
        return None
    return json.dumps({k: json_value(v) for k, v in image.items()}, ensure_ascii=False)


def _keeps(patterns: tuple[str, ...], schema: str, table: str) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(f"{schema}.{table}", p) for p in patterns)


def changes_of(event: ThlEvent, first_row: int = 0,
               tables: Iterable[str] = ()) -> Iterator[Change]:
    """The row changes of one THL fragment; rows are numbered from ``first_row``."""
    patterns = tuple(tables)
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=event.tstamp)
    row = first_row
    for item in event.data:
        if not isinstance(item, RowChange):
            continue
        keep = _keeps(patterns, item.schema, item.table)
        for r in range(item.row_count):
            if keep:
                after = ({s.name: from_thl(s, v) for s, v in
                          zip(item.column_specs, item.column_values[r], strict=True)}
                         if item.column_values else None)
                before = ({s.name: from_thl(s, v) for s, v in
                           zip(item.key_specs, item.key_values[r], strict=True)}
                          if item.key_values else None)
                image = before if item.action is RowAction.DELETE else after
                keys = [s.name for s in (item.column_specs or item.key_specs) if s.primary_key]
                key = {k: image[k] for k in keys} if keys and image is not None else None
                yield Change(event.seqno, event.epoch, when, item.schema, item.table,
                             item.action.value, row, key, before, after)
            row += 1


class ChangeReader:
    """Row changes of one THL topic (read_committed, no consumer group)."""

    def __init__(self, kafka: str | Mapping[str, Any], topic: str,
                 codec: ThlCodec | None = None) -> None:
        self.kafka = kafka
        self.topic = topic
        self.reader = ThlReader(kafka, topic, codec)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> ChangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def bounds(self) -> tuple[int, int] | None:
        """(first, last) seqno the THL holds, None if it is empty."""
        low, _ = self.reader.watermarks()
        first = self.reader.sample(low)
        tail = self.reader.tail()
        if first is None or tail is None:
            return None
        return first[1], tail.seqno

    def range(self, low: int, high: int, tables: Iterable[str] = (),
              progress: Callable[[int, int], None] | None = None) -> Iterator[Change]:
        """Row changes of seqnos ``low`` .. ``high - 1``, in THL order.

        ``tables``: ``schema.table`` patterns (``*`` wildcards) to keep. ``progress(seqno,
        rows)`` is called after each seqno. Raises ThlGapError if a seqno of the range is
        missing (or the THL ends before ``high - 1``).
        """
        if high <= low:
            return
        start = self.reader.offset_of(low)
        expected = low
        for event, first_row in self._whole(self.reader.records(start), expected_first=low):
            if event.seqno >= high:
                return
            if event.seqno != expected:
                raise ThlGapError(f"{self.topic}: seqno {expected} is missing (found "
                                  f"{event.seqno}); the THL must be gapless")
            rows = 0
            for change in changes_of(event, first_row, tables):
                rows += 1
                yield change
            if event.last_frag:
                expected += 1
                if progress is not None:
                    progress(event.seqno, rows)
        if expected < high:
            raise ThlGapError(f"{self.topic}: the THL ends at seqno {expected - 1}; the "
                              f"range asked for goes to {high - 1}")

    def follow(self, start: int, tables: Iterable[str] = (),
               stop: threading.Event | None = None, idle: float = 0.5) -> Iterator[Change]:
        """Row changes from seqno ``start`` on, waiting for new ones as they are committed,
        until ``stop`` is set (or the caller stops iterating)."""
        stop = stop or threading.Event()
        expected = start
        offset = self.reader.offset_of(start)
        for event, first_row in self._whole(self.reader.follow(offset, stop, idle),
                                            expected_first=start):
            if event.seqno != expected:
                raise ThlGapError(f"{self.topic}: seqno {expected} is missing (found "
                                  f"{event.seqno}); the THL must be gapless")
            yield from changes_of(event, first_row, tables)
            if event.last_frag:
                expected += 1

    def _whole(self, records: Iterable[ThlRecord], expected_first: int
               ) -> Iterator[tuple[ThlEvent, int]]:
        """Decoded fragments in order with the row number each starts at; errors raise."""
        seqno, fragno, row = -1, 0, 0
        for rec in records:
            if rec.event is None:
                raise ThlError(f"{self.topic}: {rec.error}")
            event = rec.event
            if event.seqno < expected_first:
                continue
            if event.seqno != seqno:
                if seqno >= 0 and fragno != 0:
                    raise ThlGapError(f"{self.topic}: seqno {seqno} ends at fragment "
                                      f"{fragno - 1} without its last fragment")
                seqno, fragno, row = event.seqno, 0, 0
            if event.fragno != fragno:
                raise ThlGapError(f"{self.topic}: seqno {seqno} is missing fragment {fragno}")
            yield event, row
            row += event.row_count
            fragno = 0 if event.last_frag else fragno + 1

    def to_pandas(self, low: int, high: int, tables: Iterable[str] = ()) -> pd.DataFrame:
        """The range as a pandas DataFrame (``COLUMNS``; images as dicts of typed values)."""
        import pandas as pd

        rows = [(c.seqno, c.epoch, c.commit_time, c.schema, c.table, c.op, c.row, c.key,
                 c.before, c.after) for c in self.range(low, high, tables)]
        return pd.DataFrame(rows, columns=list(COLUMNS))


def spark_changes(spark: SparkSession, kafka: str | Mapping[str, Any], topic: str, low: int,
                  high: int, tables: Iterable[str] = ()) -> DataFrame:
    """Row changes of seqnos ``low`` .. ``high - 1`` as a Spark DataFrame (``SPARK_SCHEMA``:
    images as JSON text, see ``json_value``), read with Spark's Kafka source.

    The offsets of the range are found on the driver (two seeks by seqno); Spark reads the
    records between them in its executors and decodes them there with this package's codec
    (executors need the ``tungsten-kafka`` package: the same virtualenv, or ``--py-files``).
    Gaps raise ThlGapError: the seqnos found are counted against the range.
    """
    settings = client_settings(kafka)
    with ThlReader(settings, topic) as reader:
        start, end = reader.offset_of(low), reader.offset_of(high)
    options = {"kafka.bootstrap.servers": settings["bootstrap.servers"],
               "assign": json.dumps({topic: [0]}),
               "startingOffsets": json.dumps({topic: {"0": start}}),
               "endingOffsets": json.dumps({topic: {"0": end}}),
               "kafka.isolation.level": "read_committed", "failOnDataLoss": "true"}
    options.update({f"kafka.{k}": str(v) for k, v in settings.items()
                    if k != "bootstrap.servers"})
    raw = spark.read.format("kafka").options(**options).load().select("key", "value",
                                                                       "offset")
    decoded = spark.createDataFrame(raw.rdd.mapPartitions(_decoder(topic, tuple(tables))),
                                    _DECODED).persist()
    try:
        seen = decoded.where("kind = 'F' AND last_frag").selectExpr(
            "count(DISTINCT seqno) AS n", "min(seqno) AS lo", "max(seqno) AS hi").first()
        if seen is None or seen["n"] != high - low or seen["lo"] != low \
                or seen["hi"] != high - 1:
            have = 0 if seen is None else seen["n"]
            raise ThlGapError(f"{topic}: the THL holds {have} whole seqno(s) of the "
                              f"{high - low} in {low}..{high - 1}: it must be gapless")
    except BaseException:
        decoded.unpersist()
        raise
    # A seqno split into fragments numbers its rows from 0 in each: shift each fragment's
    # rows by the rows of the fragments before it.
    frags = decoded.where("kind = 'F'").selectExpr(
        "seqno", "fragno", "sum(rows) OVER (PARTITION BY seqno ORDER BY fragno ROWS BETWEEN "
        "UNBOUNDED PRECEDING AND 1 PRECEDING) AS shift")
    changes = decoded.where("kind = 'C'").join(frags, ["seqno", "fragno"])
    return changes.selectExpr("seqno", "epoch", "commit_time", "schema", "table", "op",
                              "row + coalesce(shift, 0) AS row", "key", "before", "after")


#: What the executors decode: a row per fragment (kind F) and per row change (kind C).
_DECODED = ("kind STRING, seqno BIGINT, fragno INT, last_frag BOOLEAN, rows BIGINT, "
            "epoch BIGINT, commit_time TIMESTAMP, schema STRING, table STRING, op STRING, "
            "row BIGINT, key STRING, before STRING, after STRING")


def _decoder(topic: str, tables: tuple[str, ...]
             ) -> Callable[[Iterable[Any]], Iterable[tuple[Any, ...]]]:
    def decode(values: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        codec = ThlCodec()
        # The one THL partition is one Spark partition, in offset order: a fragment
        # published in chunks is joined here, as ThlReader joins it.
        chunks = Joiner(topic)
        for item in values:
            key, value = bytes(item.key or b""), bytes(item.value or b"")
            if is_chunk_key(key):
                joined = chunks.add(key, value, item.offset)
                if joined is None:
                    continue
                value = joined.value
            else:
                chunks.whole()
            event = codec.decode(value, topic=topic, partition=0, offset=item.offset)
            rows = event.row_count
            yield ("F", event.seqno, event.fragno, event.last_frag, rows, None, None, None,
                   None, None, None, None, None, None)
            for change in changes_of(event, 0, tables):
                r = change.record()
                yield ("C", change.seqno, event.fragno, None, None, r["epoch"],
                       r["commit_time"], r["schema"], r["table"], r["op"], r["row"], r["key"],
                       r["before"], r["after"])
    return decode
