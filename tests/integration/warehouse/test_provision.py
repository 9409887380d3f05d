"""Provisioning into the warehouse end to end: the real extractor reads a drifted table in
chunks (``trepctl provision``) while a writer keeps changing it, and the Delta table ends
equal to the source row by row (rows lost, changed and invented on the target repaired)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from stack.service import Service
from stack.services.mariadb import MariaDB

from ..conformance.conftest import Conformance
from ..conformance.kinds.warehouse import WarehouseKind
from ..conformance.tables import ITEMS
from ..harness.cleanup import cleaned
from ..sparks import connect_session


@pytest.fixture
def svc(tmp_path: Path, spark: Service, spark_connect: Service, mariadb_source: MariaDB,
        kafka: Service, zookeeper: Service) -> Iterator[Conformance]:
    kind = WarehouseKind({"spark": spark, "spark_connect": spark_connect})
    yield from cleaned(Conformance(tmp_path, kind, mariadb_source, kafka, zookeeper))


def test_reprovisioning_repairs_a_drifted_delta_table_under_writes(svc: Conformance) -> None:
    svc.start()
    svc.create(ITEMS)
    s = svc.schema
    svc.src(f"INSERT INTO {s}.items VALUES (%s, %s, %s, %s)",
            params=[(i, f"item {i} ü😀", i % 7, Decimal(i) / 4) for i in range(1, 401)],
            many=True)
    svc.wait_source_applied()
    assert svc.compare(ITEMS)["items"] == 400
    # The Delta table drifts: rows lost, a value changed, a row the source never had.
    assert isinstance(svc.kind, WarehouseKind)
    table = f"delta.`{svc.kind.path(s, ITEMS)}`"
    spark = connect_session()
    spark.sql(f"DELETE FROM {table} WHERE id < 30").collect()
    spark.sql(f"UPDATE {table} SET name = 'drifted' WHERE id = 200").collect()
    spark.sql(f"UPDATE {table} SET id = 9999 WHERE id = 300").collect()
    with pytest.raises(AssertionError):
        svc.compare(ITEMS)

    stop = threading.Event()

    def writer() -> None:
        # Changes to rows being provisioned: applied idempotently, before or after their
        # chunk, and the table still converges.
        n = 0
        while not stop.is_set():
            svc.src(f"UPDATE {s}.items SET qty = qty + 1 WHERE id = {1 + n % 400}",
                    f"INSERT INTO {s}.items VALUES ({1000 + n}, 'new', 1, 0.25)",
                    f"DELETE FROM {s}.items WHERE id = {399 - n % 50}")
            n += 1
            stop.wait(0.1)

    load = threading.Thread(target=writer)
    load.start()
    try:
        done = svc.trepctl("provision", "-table", f"{s}.items", "-limit", "150")
    finally:
        stop.set()
        load.join()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "done" in done.stdout + done.stderr
    svc.wait_source_applied()
    assert svc.compare(ITEMS)["items"] > 350
