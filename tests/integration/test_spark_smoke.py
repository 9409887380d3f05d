"""Spark local writes, merges and reads a Delta table; the Kafka and Avro sources load."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from stack.services.spark import DELTA_VERSION, SPARK_VERSION, Spark, session, stop_session


@pytest.fixture(scope="module")
def spark_session(spark: Spark, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[SparkSession]:
    s = session("smoke", warehouse=tmp_path_factory.mktemp("warehouse"))
    yield s
    stop_session(s)


def test_status_is_cheap_and_true(spark: Spark) -> None:
    status = spark.status()
    assert status.up
    assert status.port is None
    assert status.version == f"Spark {SPARK_VERSION} / Delta {DELTA_VERSION}"
    names = {j.name for j in spark.jars()}
    assert f"delta-spark_2.13-{DELTA_VERSION}.jar" in names
    assert f"spark-sql-kafka-0-10_2.13-{SPARK_VERSION}.jar" in names
    # pyspark ships these; a second copy on spark.jars would clash with its own.
    assert not any(n.startswith(("scala-library", "hadoop-client", "slf4j-api")) for n in names)


def test_delta_write_merge_read(spark_session: SparkSession, tmp_path: Path) -> None:
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

    batch_schema = StructType([*schema.fields, StructField("op", StringType())])
    batch = spark_session.createDataFrame(
        [(1, "ünïcode ✓", Decimal("9.9000000000"), ts, "U"), (2, None, None, None, "D"),
         (4, "four", Decimal("4.0000000000"), None, "I")], batch_schema)
    (DeltaTable.forPath(spark_session, path).alias("t")
     .merge(batch.alias("s"), "t.id = s.id")
     .whenMatchedDelete(condition="s.op = 'D'")
     .whenMatchedUpdate(set={"name": "s.name", "amount": "s.amount", "ts": "s.ts"})
     .whenNotMatchedInsert(values={"id": "s.id", "name": "s.name", "amount": "s.amount",
                                   "ts": "s.ts"})
     .execute())

    rows = [tuple(r) for r in spark_session.read.format("delta").load(path).orderBy("id")
            .collect()]
    assert rows == [(1, "ünïcode ✓", Decimal("9.9000000000"), ts),
                    (3, "three", Decimal("-3.0000000001"), ts),
                    (4, "four", Decimal("4.0000000000"), None)]
    history = DeltaTable.forPath(spark_session, path).history().collect()
    assert [h.operation for h in history] == ["MERGE", "WRITE"]
    metrics = history[0].operationMetrics
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsDeleted"],
            metrics["numTargetRowsInserted"]) == ("1", "1", "1")


def test_kafka_and_avro_sources_are_on_the_classpath(spark_session: SparkSession,
                                                      tmp_path: Path) -> None:
    jvm = spark_session.sparkContext._jvm
    assert jvm is not None
    # Classes from spark.jars live in Spark's context class loader, not the system one.
    loader = jvm.Thread.currentThread().getContextClassLoader()
    for cls in ("org.apache.spark.sql.kafka010.KafkaSourceProvider",
                "org.apache.kafka.clients.consumer.KafkaConsumer"):
        assert jvm.java.lang.Class.forName(cls, True, loader).getName() == cls
    df = spark_session.createDataFrame([(1, b"\x00\x01", "é")], "id long, b binary, s string")
    df.write.format("avro").save(str(tmp_path / "avro"))
    back = spark_session.read.format("avro").load(str(tmp_path / "avro")).collect()
    assert [tuple(r) for r in back] == [(1, bytearray(b"\x00\x01"), "é")]


def test_stop_session_ends_the_jvm(spark_session: SparkSession) -> None:
    gateway = SparkContext._gateway
    assert gateway is not None
    proc = gateway.proc
    assert proc.poll() is None
    stop_session(spark_session)
    assert proc.poll() is not None
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)
