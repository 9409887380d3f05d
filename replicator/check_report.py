"""Consistency checks as an operator asks for them and reads them (``trepctl check``, the
console): one request for the whole service, results per consumer group and table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient

from replicator.config import ServiceSettings
from replicator.control import ComponentNodes
from replicator.requests import CheckRequest, read_request, write_request

#: Per group and table: ``state`` (equal, different, pending, unsupported) and details.
Report = dict[str, dict[str, dict[str, Any]]]


class CheckBusy(RuntimeError):
    """A check is requested or running already."""


def start_check(zk: KazooClient, service: ServiceSettings, tables: Sequence[Sequence[str]],
                limit: int) -> CheckRequest:
    """Ask for a check of ``tables`` ([schema, table]; none: every replicated one)."""
    current = read_request(zk, service, CheckRequest)
    if current is not None and current.state in ("requested", "running"):
        raise CheckBusy(f"check {current.id} is {current.state} already; wait for it to "
                        "finish")
    request = CheckRequest(tables=[list(t) for t in tables], limit=limit)
    write_request(zk, service, request)
    return request


def check_report(zk: KazooClient, service: ServiceSettings, groups: Sequence[str],
                 nodes: Callable[[str], ComponentNodes]) -> tuple[CheckRequest | None, Report]:
    """The latest check request and, per group and table: equal, different (with the key
    ranges), pending or unsupported."""
    req = read_request(zk, service, CheckRequest)
    if req is None:
        return None, {}
    report: Report = {}
    for group in groups:
        found = nodes(f"consumers/{group}").checks() or {}
        results = found.get("results", {}) if found.get("request") == req.id else {}
        tables: dict[str, dict[str, Any]] = {}
        for schema, table in req.resolved:
            name = f"{schema}.{table}"
            got = results.get(name, {})
            expected = req.ranges.get(name, 0)
            if any(r.get("unsupported") for r in got.values()):
                tables[name] = {"state": "unsupported"}
            elif req.state != "done" or len(got) < expected or expected == 0:
                tables[name] = {"state": "pending", "ranges": f"{len(got)}/{expected}"}
            else:
                bad = [r for r in got.values() if not r["equal"]]
                tables[name] = {"state": "different" if bad else "equal",
                                "ranges": expected,
                                "rows": sum(r["source_count"] for r in got.values()),
                                "different": [{"range": r["range"], "after_key": r["lo"],
                                               "up_to_key": r["hi"],
                                               "source_rows": r["source_count"],
                                               "target_rows": r["target_count"]}
                                              for r in sorted(bad, key=lambda r: r["range"])]}
        report[group] = tables
    return req, report
