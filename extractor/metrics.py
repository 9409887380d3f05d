"""Prometheus view of the extractor, read from its status at scrape time."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extractor.service import Extractor
from replicator.state import State
from replicator.zk_metrics import ZkCollector

Family = GaugeMetricFamily | CounterMetricFamily


class ExtractorCollector(Collector):
    """Last extracted seqno, its latency, whether it is ONLINE, its retries and lost leads."""

    def __init__(self, extractor: Extractor, service: str) -> None:
        self.extractor = extractor
        self.service = service

    def collect(self) -> Iterator[Family]:
        yield from self._stream()
        yield from self._xa()
        yield from self._restarts()
        yield from self._provisioning()
        if self.extractor.zk_health is not None:
            yield from ZkCollector(self.extractor.zk_health, self.service, "extractor").collect()

    def _stream(self) -> Iterator[Family]:
        status = self.extractor.status
        for name, doc, value in (
            ("trep_extracted_last_seqno", "Last seqno committed to the THL",
             status.appliedLastSeqno),
            ("trep_extractor_latency_seconds", "Source commit to THL commit of the last seqno",
             status.appliedLatency),
            ("trep_extractor_online", "1 when the extractor is ONLINE",
             1 if status.state == State.ONLINE.value else 0),
        ):
            yield self._gauge(name, doc, value)
        progress = self.extractor.progress
        now = time.monotonic()
        for name, doc, value in (
            ("trep_extractor_seconds_since_binlog_event", "Seconds since the extractor read "
             "a binlog event (heartbeats included: 0.2 s apart when the source is idle)",
             now - progress.last_event_at),
            ("trep_extractor_uncommitted_seconds", "Seconds the oldest transaction read has "
             "waited for its THL commit (0: none waiting)",
             0.0 if progress.pending_since is None else now - progress.pending_since),
            ("trep_extractor_stalled", "1 while the status shows a stall (stall_warning_s)",
             0 if status.stall == "NONE" else 1),
        ):
            yield self._gauge(name, doc, value)

    def _xa(self) -> Iterator[Family]:
        assembler = self.extractor.assembler
        for name, doc, value in (
            ("trep_extractor_xa_prepared", "XA transactions with replicated changes "
             "prepared on the source and not yet committed or rolled back (held by the "
             "extractor)",
             len(assembler.held_xa()) if assembler else 0),
            ("trep_extractor_xa_oldest_open_seconds", "How long the oldest prepared XA "
             "transaction has been waiting for its outcome",
             assembler.oldest_xa_age() if assembler else 0.0),
        ):
            yield self._gauge(name, doc, value)
        yield self._counter(
            "trep_extractor_xa_unknown_outcomes", "XA COMMIT/ROLLBACK read whose prepare "
            "precedes the extractor's start (its rows are not in the THL)",
            assembler.unknown_outcomes if assembler else 0)
        yield self._counter(
            "trep_extractor_ddl_not_understood", "Table DDL statements published with their "
            "text only: the parser could not read them into schema-change items",
            assembler.ddl_not_understood if assembler else 0)

    def _restarts(self) -> Iterator[Family]:
        yield self._counter(
            "trep_extractor_retries", "Fresh starts from the THL tail after the source or "
            "Kafka failed", self.extractor.retries)
        yield self._counter(
            "trep_extractor_leadership_losses", "Times the extractor lost its leader lock "
            "(ZooKeeper session expired, or fenced by a new leader) and went back to standby",
            self.extractor.leadership_losses)

    def _provisioning(self) -> Iterator[Family]:
        prov = self.extractor.provisioner
        yield self._counter("trep_provision_rows",
                            "Rows published by provisioning (this process)",
                            prov.rows_total if prov else 0)
        yield self._gauge("trep_provision_active", "1 while a provisioning runs",
                          1.0 if prov is not None and prov.active else 0.0)

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["service"])
        family.add_metric([self.service], float(value))
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["service"])
        family.add_metric([self.service], float(value))
        return family
