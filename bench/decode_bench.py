"""THL decoding benchmark: microseconds per row, fastavro against the compiled reader.

No server: events are encoded as the extractor writes them, then decoded as a consumer
does (``ThlCodec.decode``), by both readers. Shapes: sysbench's oltp_write_only
transaction (two updates, a delete and an insert, one row each: the shape where the
column specs of every row change used to dominate) and a bulk insert of 1,000 rows.
Results as JSON in ``bench/results/decode.json``. Not a test: nothing is asserted.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from results import RESULTS, write_result

from thl_topics.codec import ThlCodec
from thl_topics.event import ColumnSpec, RowAction, RowChange, ThlEvent, ThlValue

SPECS = [ColumnSpec(1, "id", "INT", primary_key=True, nullable=False),
         ColumnSpec(2, "k", "INT", nullable=False),
         ColumnSpec(3, "c", "CHAR", length=120, charset="utf8mb4", nullable=False),
         ColumnSpec(4, "pad", "CHAR", length=60, charset="utf8mb4", nullable=False)]


def _row(i: int) -> list[ThlValue]:
    return [i, i * 7 % 1000, f"{i:011d}-" * 10, f"{i:011d}-" * 5]


def _event(seqno: int, data: list[RowChange]) -> ThlEvent:
    return ThlEvent(seqno=seqno, epoch=0, source_id="db1", event_id=f"bin.000001:{seqno:016d};0",
                    shard_id="sbtest", tstamp=1_763_900_000_000_000, data=list(data))


def oltp(n: int) -> list[ThlEvent]:
    """``n`` oltp_write_only transactions, one event each (4 row changes, 6 row images)."""
    def change(action: RowAction, i: int) -> RowChange:
        after = [_row(i)] if action is not RowAction.DELETE else []
        before = [_row(i)] if action is not RowAction.INSERT else []
        return RowChange(action, "sbtest", f"sbtest{i % 8 + 1}", SPECS,
                         SPECS if before else [], after, before)
    return [_event(s, [change(RowAction.UPDATE, s), change(RowAction.UPDATE, s + 1),
                       change(RowAction.DELETE, s + 2), change(RowAction.INSERT, s + 2)])
            for s in range(n)]


def bulk(n: int) -> list[ThlEvent]:
    """``n`` events of one 1,000-row insert each."""
    return [_event(s, [RowChange(RowAction.INSERT, "sbtest", "sbtest1", SPECS, [],
                                 [_row(s * 1000 + i) for i in range(1000)])])
            for s in range(n)]


def _measure(decode: Callable[[bytes], ThlEvent], records: list[bytes], rows: int,
             repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for rec in records:
            decode(rec)
        best = min(best, time.perf_counter() - started)
    return round(best / rows * 1e6, 3)


@click.command()
@click.option("--events", default=2000, show_default=True, help="oltp events per shape")
@click.option("--repeat", default=5, show_default=True, help="best of this many passes")
@click.option("--out", type=click.Path(path_type=Path), default=RESULTS / "decode.json",
              show_default=True)
def main(events: int, repeat: int, out: Path) -> None:
    codec = ThlCodec()
    result: dict[str, Any] = {"benchmark": "thl-decode", "python": platform.python_version(),
                              "unit": "microseconds per row (best of passes)", "shapes": {}}
    for name, made in (("oltp_write_only", oltp(events)), ("bulk_insert_1000", bulk(20))):
        records = [codec.encode(e) for e in made]
        rows = sum(c.row_count for e in made for c in e.data if isinstance(c, RowChange))
        # A fresh codec per reader: the compiled one starts with no specs cached.
        result["shapes"][name] = {
            "events": len(records), "rows": rows,
            "fastavro_us_per_row": _measure(ThlCodec().decode_reference, records, rows,
                                            repeat),
            "compiled_us_per_row": _measure(ThlCodec().decode, records, rows, repeat),
        }
    write_result(result, out)


if __name__ == "__main__":
    main()
