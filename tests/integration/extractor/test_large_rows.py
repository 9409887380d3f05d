"""A row larger than a Kafka record: published in chunks, read back whole and exact, with the
extractor's memory a small multiple of the row."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import Callable

import pymysql
import pytest

from stack.services.mariadb import MariaDB
from thl_topics.event import RowChange
from thl_topics.records import parse_chunk

from ..harness.processes import peak_rss
from ..harness.sql import hex_bytes
from .conftest import ServiceUnderTest

MIB = 1 << 20


def _insert(svc: ServiceUnderTest, table: str, rows: list[tuple[int, bytes]]) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=svc.source.port, user="root", password="",
                           autocommit=True, max_allowed_packet=256 * MIB)
    try:
        with conn.cursor() as cur:
            for key, value in rows:
                cur.execute(f"INSERT INTO {svc.schema}.{table} VALUES ({key}, "
                            f"{hex_bytes(value)})")
    finally:
        conn.close()


# Its extractor's memory is measured: on a source no other test writes to (see
# test_fragments).
@pytest.mark.exclusive("mariadb_scratch")
def test_a_64_mib_row_travels_in_chunks_and_arrives_exact(
        make_service: Callable[..., ServiceUnderTest], mariadb_scratch: MariaDB) -> None:
    svc = make_service(source=mariadb_scratch, batch_ms=20)
    s = svc.schema
    svc.sql(f"CREATE TABLE {s}.blobs (id INT PRIMARY KEY, b LONGBLOB)")
    proc = svc.start_process()
    svc.wait_streaming(proc=proc)
    base = peak_rss(proc.pid)
    big, medium = os.urandom(64 * MIB), os.urandom(12 * MIB)
    try:
        _insert(svc, "blobs", [(1, big), (2, medium), (3, b"small")])
        deadline = time.monotonic() + 120
        while True:
            found = {row[0]: row[1] for e in svc.events() for item in e.data
                     if isinstance(item, RowChange) and item.table == "blobs"
                     for row in item.column_values}
            if len(found) == 3:
                break
            assert proc.poll() is None, svc.log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, svc.log_path.read_text()[-3000:]
            time.sleep(0.5)
        assert hashlib.sha256(found[1]).digest() == hashlib.sha256(big).digest()  # type: ignore[arg-type]
        assert found[2] == medium and found[3] == b"small"
        peak = peak_rss(proc.pid) - base
        print(f"extractor peak growth {peak / MIB:.0f} MiB, base {base / MIB:.0f} MiB")
        # The row (64 MiB) is read from the binlog, decoded, encoded and handed to Kafka.
        assert peak < 4 * 64 * MIB, f"extractor grew by {peak / MIB:.0f} MiB for a 64 MiB row"
        with svc.reader() as reader:
            low, high = reader.watermarks()
            chunks = [parse_chunk(m.key() or b"") for m in reader.raw(low, high)]
            sizes = [len(m.value() or b"") for m in reader.raw(low, high)]
        assert sum(1 for c in chunks if c is not None) >= 9 + 2
        assert max(sizes) <= svc.cfg.kafka.max_message_bytes
        assert "published in 9 chunks" in svc.log_path.read_text() or \
            "chunks of at most" in svc.log_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, svc.log_path.read_text()[-3000:]
