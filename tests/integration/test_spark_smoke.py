"""Spark local writes, merges and reads a Delta table; the Kafka and Avro sources load."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from stack.services.spark import Spark, session


@pytest.fixture(scope="module")
def spark_session(spark: Spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    s = session("smoke", warehouse=tmp_path_factory.mktemp("warehouse"))
    yield s
    s.stop()


def test_delta_write_merge_read(spark_session: Any, tmp_path: Path) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql.types import (
        DecimalType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType([
        StructField("id", LongType(), False), StructField("name", StringType()),
        StructField("amount", DecimalType(38, 10)), StructField("ts", TimestampType()),
    ])
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 678901)
    base = [(1, "héllo 😀", Decimal("1.5000000000"), ts), (2, None, None, None),
            (3, "three", Decimal("-3.0000000001"), ts)]
    path = str(tmp_path / "rows")
    spark_session.createDataFrame(base, schema).write.format("delta").save(path)

    batch = spark_session.createDataFrame(
        [(1, "updated", Decimal("9.9000000000"), ts, "U"), (2, None, None, None, "D"),
         (4, "four", Decimal("4.0000000000"), None, "I")],
        schema.add(StructField("op", StringType())))
    (DeltaTable.forPath(spark_session, path).alias("t")
     .merge(batch.alias("s"), "t.id = s.id")
     .whenMatchedDelete(condition="s.op = 'D'")
     .whenMatchedUpdate(set={"name": "s.name", "amount": "s.amount", "ts": "s.ts"})
     .whenNotMatchedInsert(values={"id": "s.id", "name": "s.name", "amount": "s.amount",
                                   "ts": "s.ts"})
     .execute())

    rows = [tuple(r) for r in spark_session.read.format("delta").load(path).orderBy("id")
            .collect()]
    assert rows == [(1, "updated", Decimal("9.9000000000"), ts),
                    (3, "three", Decimal("-3.0000000001"), ts),
                    (4, "four", Decimal("4.0000000000"), None)]
    history = DeltaTable.forPath(spark_session, path).history().select("operation").collect()
    assert [h.operation for h in history] == ["MERGE", "WRITE"]


def test_kafka_and_avro_sources_are_on_the_classpath(spark_session: Any, tmp_path: Path) -> None:
    jvm = spark_session.sparkContext._jvm
    provider = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.kafka010.KafkaSourceProvider", True,
        jvm.Thread.currentThread().getContextClassLoader())
    assert provider.getName().endswith("KafkaSourceProvider")
    df = spark_session.createDataFrame([(1, b"\x00\x01", "é")], "id long, b binary, s string")
    df.write.format("avro").save(str(tmp_path / "avro"))
    back = spark_session.read.format("avro").load(str(tmp_path / "avro")).collect()
    assert [tuple(r) for r in back] == [(1, bytearray(b"\x00\x01"), "é")]
