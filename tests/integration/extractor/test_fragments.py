"""A 1,000,000-row transaction arrives as fragments, with bounded extractor memory."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stack.services.mariadb import MariaDB
from thl_topics.event import RowChange

from .conftest import ServiceUnderTest

ROWS = 1_000_000
FRAGMENT_ROWS = 20_000


def _rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


# The extractor reads its source's whole binlog: on the shared source, another test's 64 MiB
# row (written for another schema, filtered out) costs this extractor ~160 MiB while it
# passes, which is not what this test measures. So a source no other test writes to.
@pytest.mark.exclusive("mariadb_scratch")
def test_million_row_transaction_is_fragmented(
        make_service: Callable[..., ServiceUnderTest], mariadb_scratch: MariaDB) -> None:
    svc = make_service(source=mariadb_scratch, fragment_rows=FRAGMENT_ROWS,
                       fragment_bytes=64 * 1024 * 1024)
    s = svc.schema
    svc.sql(f"CREATE TABLE {s}.big (id INT PRIMARY KEY, v VARCHAR(40))")
    proc = svc.start_process()
    try:
        start = svc.wait_streaming(proc=proc)
        time.sleep(1)  # let the last markers drain
        start = svc.tail_seqno()
        baseline = _rss_kib(proc.pid, "VmRSS")
        svc.sql(f"INSERT INTO {s}.big SELECT seq, CONCAT('row-', seq, '-', REPEAT('x', 20)) "
                f"FROM {s}.seq_1_to_{ROWS}")
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and svc.tail_seqno() <= start:
            time.sleep(1)
        peak = _rss_kib(proc.pid, "VmHWM")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    frags = []
    total_rows = 0
    first_ids: list[int] = []
    with svc.reader() as reader:
        for rec in reader.records(reader.offset_of(start + 1)):
            assert rec.event is not None, rec.error
            frags.append((rec.event.fragno, rec.event.last_frag))
            for item in rec.event.data:
                assert isinstance(item, RowChange)
                total_rows += len(item.column_values)
                first_ids.append(item.column_values[0][0])  # type: ignore[arg-type]
    assert total_rows == ROWS
    assert [f for f, _ in frags] == list(range(len(frags)))
    assert [last for _, last in frags] == [False] * (len(frags) - 1) + [True]
    assert len(frags) >= ROWS // (2 * FRAGMENT_ROWS)
    assert first_ids == sorted(first_ids)
    # Holding the transaction whole takes ~290 MiB (measured with one fragment); streamed,
    # a few MiB, up to ~40 MiB while Kafka is slow (the encoded fragments wait in the
    # producer's queue, bounded at 64 MiB).
    growth_mib = (peak - baseline) / 1024
    print(f"extractor RSS: baseline {baseline / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, "
          f"{len(frags)} fragments")
    assert growth_mib < 150, f"extractor memory grew by {growth_mib:.0f} MiB"
