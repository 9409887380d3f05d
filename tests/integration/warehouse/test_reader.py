"""The THL as data: the change reader returns exactly the row changes of a range, refuses
gaps, follows new ones; Spark's Kafka source gives the same rows; ``thl export`` writes
files that Spark and pandas read back equal."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from stack.services.kafka import Kafka
from stack.settings import REPO_ROOT
from thl_topics.admin import ThlTopicSpec, ensure_thl_topic
from thl_topics.event import Statement, ThlEvent
from thl_topics.producer import ThlProducer
from thl_topics.row_changes import COLUMNS, Change, ChangeReader, ThlGapError, spark_changes

from ..sparks import local_session
from .conftest import BASE_TSTAMP, delete, insert, spec, update

ITEM = [spec(1, "id", "INT", key=True), spec(2, "name", "VARCHAR", length=40),
        spec(3, "price", "DECIMAL", length=65, scale=30), spec(4, "raw", "BLOB")]


class Thl:
    def __init__(self, kafka: Kafka) -> None:
        self.topic = f"thl.r{uuid.uuid4().hex[:8]}"
        self.kafka = kafka
        ensure_thl_topic(kafka.admin(), ThlTopicSpec(self.topic))
        self.producer = ThlProducer(kafka.bootstrap, self.topic, f"t-{self.topic}")

    def event(self, seqno: int, *items: Any, fragno: int = 0, last: bool = True) -> None:
        self.producer.publish(ThlEvent(seqno=seqno, epoch=7, source_id="r",
                                       event_id=f"r:{seqno}", shard_id="s",
                                       tstamp=BASE_TSTAMP + seqno, fragno=fragno,
                                       last_frag=last, data=list(items)))
        self.producer.commit()


@pytest.fixture
def thl(kafka: Kafka) -> Iterator[Thl]:
    t = Thl(kafka)
    yield t
    t.producer.close()
    kafka.admin().delete_topics([t.topic])


def _fill(thl: Thl) -> None:
    thl.event(0, insert("s", "items", ITEM, [1, "a", "1.5", b"\x00\xff"], [2, None, None, b""]))
    thl.event(1, Statement("ALTER TABLE s.items ADD COLUMN x INT"))  # no row change
    thl.event(2, update("s", "items", ITEM, [1, "a", "1.5", b"\x00\xff"],
                        [10, "ü😀", "-0.000000000000000000000000000001", None]),
              insert("s", "other", ITEM[:2], [5, "o"]))
    thl.event(3, insert("s", "items", ITEM, [3, "frag0", None, None]), last=False)
    thl.event(3, delete("s", "items", ITEM, [2, None, None, b""]), fragno=1)


def test_a_range_is_exactly_its_row_changes(thl: Thl) -> None:
    _fill(thl)
    with ChangeReader(thl.kafka.bootstrap, thl.topic) as reader:
        got = list(reader.range(0, 4))
        assert [(c.seqno, c.op, c.table, c.row, c.key) for c in got] == [
            (0, "INSERT", "items", 0, {"id": 1}), (0, "INSERT", "items", 1, {"id": 2}),
            (2, "UPDATE", "items", 0, {"id": 10}), (2, "INSERT", "other", 1, {"id": 5}),
            (3, "INSERT", "items", 0, {"id": 3}), (3, "DELETE", "items", 1, {"id": 2})]
        upd = got[2]
        assert upd.before == {"id": 1, "name": "a", "price": Decimal("1.5"),
                              "raw": b"\x00\xff"}
        assert upd.after is not None and upd.after["price"] == Decimal("-1E-30")
        assert upd.epoch == 7 and upd.commit_time == dt.datetime.fromtimestamp(
            (BASE_TSTAMP + 2) / 1e6, dt.UTC)
        assert [c.seqno for c in reader.range(2, 3, tables=["s.oth*"])] == [2]
        assert list(reader.range(1, 2)) == []  # a statement only: no row change
        frame = reader.to_pandas(0, 4, tables=["s.items"])
        assert list(frame.columns) == list(COLUMNS) and len(frame) == 5
        with pytest.raises(ThlGapError, match="ends at seqno 3"):
            list(reader.range(0, 5))
    thl.event(5, insert("s", "items", ITEM, [9, "late", None, None]))  # seqno 4 missing
    with ChangeReader(thl.kafka.bootstrap, thl.topic) as reader, \
            pytest.raises(ThlGapError, match="seqno 4 is missing"):
        list(reader.range(3, 6))


def test_follow_returns_new_changes_as_they_come(thl: Thl) -> None:
    _fill(thl)
    stop = threading.Event()
    seen: list[Change] = []

    def follow() -> None:
        with ChangeReader(thl.kafka.bootstrap, thl.topic) as reader:
            for change in reader.follow(2, stop=stop):
                seen.append(change)
                if change.seqno == 5:
                    stop.set()

    worker = threading.Thread(target=follow)
    worker.start()
    thl.event(4, insert("s", "items", ITEM, [4, "new", None, None]))
    thl.event(5, delete("s", "items", ITEM, [4, "new", None, None]))
    worker.join(60)
    assert not worker.is_alive()
    assert [(c.seqno, c.op) for c in seen] == [(2, "UPDATE"), (2, "INSERT"), (3, "INSERT"),
                                              (3, "DELETE"), (4, "INSERT"), (5, "DELETE")]


def _records(thl: Thl, low: int, high: int) -> list[dict[str, Any]]:
    with ChangeReader(thl.kafka.bootstrap, thl.topic) as reader:
        return [c.record() for c in reader.range(low, high)]


def test_spark_reads_the_same_changes_with_its_kafka_source(thl: Thl) -> None:
    _fill(thl)
    expected = _records(thl, 0, 4)
    frame = spark_changes(local_session(), thl.kafka.bootstrap, thl.topic, 0, 4)
    got = [r.asDict() for r in frame.orderBy("seqno", "row").collect()]
    for row in got:
        row["commit_time"] = row["commit_time"].replace(tzinfo=dt.UTC)
    assert got == [dict(r) for r in expected]
    with pytest.raises(ThlGapError):
        spark_changes(local_session(), thl.kafka.bootstrap, thl.topic, 0, 6)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_thl_export_files_read_back_equal_in_pandas_and_spark(thl: Thl, tmp_path: Path,
                                                              fmt: str) -> None:
    _fill(thl)
    out = tmp_path / f"changes.{fmt}"
    done = subprocess.run([sys.executable, "-m", "trep.thl", "-topic", thl.topic,
                           "-bootstrap", thl.kafka.bootstrap, "export", "-low", "0",
                           "-high", "3", "--format", fmt, "-o", str(out)],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "6 row change(s) of seqnos 0..3" in done.stderr
    expected = pd.DataFrame(_records(thl, 0, 4), columns=list(COLUMNS))
    expected["commit_time"] = expected["commit_time"].astype("datetime64[us, UTC]")
    spark = local_session()
    if fmt == "parquet":
        back = pd.read_parquet(out)
        sdf = spark.read.parquet(str(out))
    elif fmt == "csv":
        back = pd.read_csv(out, keep_default_na=False, na_values={
            c: [""] for c in ("key", "before", "after")}, dtype={"schema": str})
        back["commit_time"] = pd.to_datetime(back["commit_time"])
        sdf = spark.read.options(header="true", multiLine="true", escape='"').csv(str(out))
    else:
        back = pd.read_json(out, lines=True, dtype=False)
        back["commit_time"] = pd.to_datetime(back["commit_time"])
        sdf = spark.read.json(str(out))
    back["commit_time"] = back["commit_time"].astype("datetime64[us, UTC]")
    back = back.astype(object).where(back.notna(), None)
    want = expected.astype(object).where(expected.notna(), None)
    assert back[list(COLUMNS)].to_dict("records") == want.to_dict("records")
    srows = sorted(sdf.select(*COLUMNS).collect(), key=lambda r: (int(r["seqno"]),
                                                                  int(r["row"])))
    assert [json.loads(r["after"]) if r["after"] else None for r in srows] == [
        json.loads(a) if a else None for a in want["after"]]
    assert [(int(r["seqno"]), r["op"], r["table"]) for r in srows] == [
        (int(s), o, t) for s, o, t in zip(want["seqno"], want["op"], want["table"],
                                          strict=True)]
