"""A warehouse session's settings; the Spark Connect release pool survives a client closed
from the garbage collector."""

from __future__ import annotations

import logging

import pytest
from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

from consumers.warehouse.config import SparkSettings
from consumers.warehouse.session import DEFAULTS, _configure, keep_release_pool


def test_a_client_closed_in_a_pool_thread_leaves_the_pool_working() -> None:
    keep_release_pool()
    pool = ExecutePlanResponseReattachableIterator._get_or_create_release_thread_pool()
    # What SparkSession.__del__ does (client.close()) when the collector runs it in one of
    # the pool's threads; unguarded, the pool stays shut down ("cannot join current
    # thread") and every later release of every session fails.
    assert pool.submit(ExecutePlanResponseReattachableIterator.shutdown).result(10) is None
    # And from any other thread, as session.stop() does.
    ExecutePlanResponseReattachableIterator.shutdown()
    again = ExecutePlanResponseReattachableIterator._get_or_create_release_thread_pool()
    assert again.submit(lambda: 42).result(10) == 42


class _Conf:
    """A session's runtime settings: ``static`` keys were fixed when its Spark started."""

    def __init__(self, static: dict[str, str]) -> None:
        self.static = static
        self.set_keys: dict[str, str] = {}

    def isModifiable(self, key: str) -> bool:
        return key not in self.static

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.static.get(key, self.set_keys.get(key, default))

    def set(self, key: str, value: str) -> None:
        assert key not in self.static, f"{key} is static: Spark refuses to set it"
        self.set_keys[key] = value


class _Session:
    def __init__(self, conf: _Conf) -> None:
        self.conf = conf


def test_static_settings_are_left_to_the_spark_start_and_a_group_s_own_is_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = "spark.sql.codegen.cache.maxEntries"
    assert cache in DEFAULTS  # static: a session cannot set it
    conf = _Conf({cache: "100", "spark.sql.warehouse.dir": "/w"})
    settings = SparkSettings(conf={"spark.sql.shuffle.partitions": "3", cache: "500"})
    with caplog.at_level(logging.WARNING, logger="consumers.warehouse.session"):
        _configure(_Session(conf), settings)  # type: ignore[arg-type]
    assert conf.set_keys["spark.sql.shuffle.partitions"] == "3"
    assert conf.set_keys["spark.sql.ansi.enabled"] == "true"  # FORCED
    assert cache not in conf.set_keys
    # The group asked for 500 and the running Spark has 100: said, with where to set it.
    assert [r.getMessage() for r in caplog.records] == [
        f"spark.conf {cache} = 500 is a static Spark setting: this session's Spark was "
        "started with 100; set it where that Spark is started"]


def test_a_static_setting_the_spark_already_has_is_not_reported(
        caplog: pytest.LogCaptureFixture) -> None:
    cache = "spark.sql.codegen.cache.maxEntries"
    conf = _Conf({cache: "500"})  # acquire passed the group's value to the Spark it started
    with caplog.at_level(logging.WARNING, logger="consumers.warehouse.session"):
        _configure(_Session(conf), SparkSettings(conf={cache: "500"}))  # type: ignore[arg-type]
    assert not caplog.records and cache not in conf.set_keys
