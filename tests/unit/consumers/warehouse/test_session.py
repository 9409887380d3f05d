"""The Spark Connect release pool survives a client closed from the garbage collector."""

from __future__ import annotations

from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

from consumers.warehouse.session import keep_release_pool


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
