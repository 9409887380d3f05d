"""The Grafana dashboard names only metrics the replicator exposes, with their labels."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from consumers.metrics import ConsumerMetrics
from extractor.metrics import ExtractorCollector
from extractor.stall import Progress
from replicator.state import State, Status

DASHBOARD = Path(__file__).resolve().parents[2] / "monitoring" / "grafana" / "replicator.json"
_SERIES = re.compile(r"\b(trep_[a-z_]+)\{([^}]*)\}")


def _exposed() -> dict[str, set[str]]:
    """Every series trep-run serves (a consumer group and an extractor), with its labels."""
    registry = CollectorRegistry()
    metrics = ConsumerMetrics(registry, "svc", "g")
    # What a group's first commit, state change and error set (gauges with labels show
    # from their first value).
    metrics.applied(1, 5, 0.1)
    metrics.rows(0)
    metrics.state(State.ONLINE)
    metrics.values_changed("zero_date", 0)
    metrics.error("data")
    metrics.channel_applied(0, 1, 5)
    extractor: Any = SimpleNamespace(
        status=Status(serviceName="svc", role="extractor"),
        progress=Progress(last_event_at=time.monotonic()), assembler=None, retries=0,
        leadership_losses=0, provisioner=None, zk_health=None)
    registry.register(ExtractorCollector(extractor, "svc"))
    found: dict[str, set[str]] = {}
    for line in generate_latest(registry).decode().splitlines():
        match = re.match(r"(trep_[a-z_]+)\{([^}]*)\}", line)
        if match:
            found.setdefault(match[1], set()).update(
                re.findall(r"([a-z_]+)=", match[2]))
    return found


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_every_series_the_dashboard_queries_is_exposed_with_its_labels() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exposed = _exposed()
    queried = [m for e in _exprs(dashboard) for m in _SERIES.findall(e)]
    assert len(queried) >= 15
    for name, selector in queried:
        assert name in exposed, f"{name} is not a metric trep-run serves"
        labels = set(re.findall(r"([a-z_]+)=~?", selector))
        assert labels <= exposed[name], (name, labels, exposed[name])


def test_the_dashboard_covers_lag_rows_errors_and_the_extractor_position() -> None:
    text = " ".join(_exprs(json.loads(DASHBOARD.read_text())))
    for needed in ("trep_applied_latency_seconds", "rate(trep_applied_rows_total",
                   "trep_consumer_errors_total", "trep_extracted_last_seqno",
                   "trep_consumer_online"):
        assert needed in text, needed
