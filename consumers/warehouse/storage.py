"""The files of the warehouse's tables and staging area, as the replicator reaches them.

Local paths (``file://``) directly; other schemes (``s3a://``, ``hdfs://`` ...) through the
Hadoop filesystem of the session's JVM, which a Spark Connect session does not have: a
remote group needs local paths the Connect server reads too (the same machine, or a shared
mount at the same path).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from consumers.warehouse.session import is_remote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local(uri: str) -> bool:
    return urlparse(uri).scheme == "file"


def local_path(uri: str) -> Path:
    return Path(urlparse(uri).path)


def hadoop(spark: SparkSession, uri: str) -> tuple[Any, Any]:
    """(filesystem, path) of ``uri`` in the session's JVM."""
    if is_remote(spark):
        raise OSError(f"{uri}: a group on a Spark Connect server (spark.remote) reaches only "
                      "file:// paths itself; use a local path the server reads too")
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def present(spark: SparkSession, uri: str) -> bool:
    """Whether anything (a Delta table or not) is at ``uri``."""
    if local(uri):
        return local_path(uri).exists()
    fs, path = hadoop(spark, uri)
    return bool(fs.exists(path))


def is_delta_table(spark: SparkSession, uri: str) -> bool:
    """Whether ``uri`` holds a Delta table (its log has a commit or a checkpoint)."""
    if local(uri):
        log = local_path(uri) / "_delta_log"
        return log.is_dir() and any(p.suffix in (".json", ".parquet") for p in log.iterdir())
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, uri))


def drop_empty_log(spark: SparkSession, uri: str) -> bool:
    """Remove a ``_delta_log`` at ``uri`` that holds no commit (a process killed while it
    created the table): Delta takes such a folder for an existing table and skips a CREATE
    TABLE IF NOT EXISTS, so every MERGE then fails with DELTA_TABLE_NOT_FOUND. True if one
    was removed; nothing was ever committed there."""
    log = f"{uri.rstrip('/')}/_delta_log"
    if not present(spark, log) or is_delta_table(spark, uri):
        return False
    if local(uri):
        shutil.rmtree(local_path(log), ignore_errors=True)
    else:
        fs, path = hadoop(spark, log)
        fs.delete(path, True)
    forget_delta_log(spark, uri)
    return True


def forget_delta_log(spark: SparkSession, uri: str) -> None:
    """Drop Delta's cached log of ``uri``: the path no longer holds that table.

    A Connect server keeps its own cache, out of reach: Delta notices a log directory that
    was removed and made again when it next lists it."""
    if is_remote(spark):
        return
    jvm: Any = spark.sparkContext._jvm
    jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(
        spark._jsparkSession, jvm.org.apache.hadoop.fs.Path(uri))
