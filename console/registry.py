"""The services the console shows: those whose service file it was given (it can act on
them and read their THL) and every other service registered in the same ZooKeeper."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient

from console.views import LagHistory
from replicator.check_report import CheckBusy, Report, check_report, start_check
from replicator.control import ComponentNodes, component_status, consumer_groups, services
from replicator.requests import CheckRequest
from thl_topics.errors import ThlError
from thl_topics.event import ThlEvent
from thl_topics.reader import ThlReader
from thl_topics.summary import ThlSummary, summarize
from trep.config import ServiceConfig


@dataclass
class Registry:
    """``configs``: service name -> its file's configuration; ``zk``: a session to the
    ZooKeeper of the first of them (``root`` its base path)."""

    zk: KazooClient
    root: str
    configs: dict[str, ServiceConfig]
    history: LagHistory = field(default_factory=LagHistory)

    def names(self) -> list[str]:
        return sorted({*self.configs, *services(self.zk, self.root)})

    def configured(self) -> list[str]:
        """The services whose files the console was given."""
        return sorted(self.configs)

    def nodes(self, service: str, component: str) -> ComponentNodes:
        return ComponentNodes(self.zk, self.root, service, component)

    def groups(self, service: str) -> list[str]:
        cfg = self.configs.get(service)
        return sorted({*(cfg.consumers if cfg else ()),
                       *consumer_groups(self.zk, self.root, service)})

    def overview(self, service: str) -> dict[str, Any]:
        """The extractor's and every group's status, as ``trepctl status --json``, each
        group with its rows/s (``rowsPerSecond``, None before two samples)."""
        groups = {g: component_status(self.nodes(service, f"consumers/{g}"))
                  for g in self.groups(service)}
        for g, status in groups.items():
            status["rowsPerSecond"] = self.history.rates.get(f"{service}/{g}")
        return {"service": service,
                "extractor": component_status(self.nodes(service, "extractor")),
                "consumers": groups}

    def config(self, service: str) -> ServiceConfig | None:
        """The service's file, if the console was given it (THL and checks need it)."""
        return self.configs.get(service)

    def thl(self, service: str) -> ThlSummary | None:
        """The THL topic's seqno range, epochs and size."""
        cfg = self.configs.get(service)
        if cfg is None:
            return None
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            return summarize(reader)

    def events(self, service: str, seqno: int) -> list[ThlEvent]:
        """The fragments of ``seqno`` (none if the THL does not hold it)."""
        cfg = self.configs.get(service)
        if cfg is None:
            return []
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            high = reader.watermarks()[1]
            try:
                start = reader.offset_of(seqno)
            except ThlError:
                return []
            found = []
            for rec in reader.records(start, high):
                if rec.seqno > seqno:
                    break
                if rec.seqno == seqno and rec.event is not None:
                    found.append(rec.event)
            return found

    def checks(self, service: str) -> tuple[CheckRequest | None, Report]:
        cfg = self.configs.get(service)
        if cfg is None:
            return None, {}
        return check_report(self.zk, cfg, self.groups(service),
                            lambda component: self.nodes(service, component))

    def start_check(self, service: str) -> CheckRequest:
        cfg = self.configs.get(service)
        if cfg is None:
            raise CheckBusy(f"the console was not given the file of service {service}")
        return start_check(self.zk, cfg, [], 10_000)

    def sample(self) -> None:
        """One lag sample of every component of every service (the chart's history)."""
        for service in self.configured():
            view = self.overview(service)
            self.history.add(f"{service}/extractor",
                             float(view["extractor"].get("appliedLatency") or 0))
            for group, status in view["consumers"].items():
                self.history.add(f"{service}/{group}",
                                 float(status.get("appliedLatency") or 0),
                                 applied_rows=int(status.get("appliedRows") or 0))
