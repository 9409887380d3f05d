"""Tungsten's ``thl list`` text layout, and a JSON form of the same events."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from thl_topics.event import RowChange, Statement, ThlEvent, ThlValue
from thl_topics.reader import ThlRecord

EVENT_TYPE = "tungsten.thl.ThlEvent"


def _time(micros: int) -> str:
    t = dt.datetime.fromtimestamp(micros / 1_000_000, dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + str(t.microsecond // 1000)


def _value(value: ThlValue) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def _options(options: dict[str, str]) -> str:
    return "[" + ", ".join(f"{k} = {v}" for k, v in options.items()) + "]"


def format_event(event: ThlEvent) -> str:
    """One event the way Tungsten's ``thl list`` prints it."""
    frag = " (last frag)" if event.last_frag else ""
    lines = [
        f"SEQ# = {event.seqno} / FRAG# = {event.fragno}{frag}",
        f"- TIME = {_time(event.tstamp)}",
        f"- EPOCH# = {event.epoch}",
        f"- EVENTID = {event.event_id}",
        f"- SOURCEID = {event.source_id}",
        "- METADATA = [" + ";".join(f"{k}={v}" for k, v in event.metadata.items()) + "]",
        f"- TYPE = {EVENT_TYPE}",
    ]
    for i, item in enumerate(event.data):
        if isinstance(item, Statement):
            lines.append(f"- OPTIONS = {_options(item.options)}")
            lines.append(f"- SCHEMA = {item.default_schema or ''}")
            lines.append(f"- SQL({i}) = {item.sql}")
            # Ours, not Tungsten's: what the extractor read the DDL as.
            lines += [f" - SCHEMA_CHANGE = {c.describe()}" for c in item.schema_changes or ()]
            continue
        lines += [f"- SQL({i}) =", f" - ACTION = {item.action.value}",
                  f" - SCHEMA = {item.schema}", f" - TABLE = {item.table}"]
        for row in range(item.row_count):
            lines.append(f" - ROW# = {row}")
            if row < len(item.column_values):
                for spec, v in zip(item.column_specs, item.column_values[row], strict=True):
                    lines.append(f"  - COL({spec.index}: {spec.name}) = {_value(v)}")
            if row < len(item.key_values):
                for spec, v in zip(item.key_specs, item.key_values[row], strict=True):
                    lines.append(f"  - KEY({spec.index}: {spec.name}) = {_value(v)}")
    return "\n".join(lines)


def format_error(rec: ThlRecord) -> str:
    """A record that does not decode: where it is and why, in the list's own layout."""
    seqno = rec.seqno if rec.seqno >= 0 else "?"
    fragno = rec.fragno if rec.fragno >= 0 else "?"
    return f"SEQ# = {seqno} / FRAG# = {fragno}\n- OFFSET = {rec.offset}\n- ERROR = {rec.error}"


def _json_value(value: ThlValue) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    return value


def event_json(event: ThlEvent) -> dict[str, Any]:
    """A JSON-friendly dict of one event (bytes as ``{"base64": ...}``)."""
    data: list[dict[str, Any]] = []
    for item in event.data:
        if isinstance(item, RowChange):
            data.append({
                "type": "rows", "action": item.action.value, "schema": item.schema,
                "table": item.table,
                "column_specs": [c.to_avro() for c in item.column_specs],
                "key_specs": [c.to_avro() for c in item.key_specs],
                "column_values": [[_json_value(v) for v in r] for r in item.column_values],
                "key_values": [[_json_value(v) for v in r] for r in item.key_values],
            })
        else:
            data.append({"type": "statement", **item.to_avro()})
    return {"seqno": event.seqno, "fragno": event.fragno, "last_frag": event.last_frag,
            "epoch": event.epoch, "tstamp": _time(event.tstamp), "event_id": event.event_id,
            "source_id": event.source_id, "shard_id": event.shard_id,
            "metadata": event.metadata, "data": data}
