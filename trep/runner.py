"""``trep-run -c service.yml``: the extractor and the consumer groups of one service.

Each component runs in its own thread; SIGTERM/SIGINT stop them on transaction boundaries.
Prometheus metrics are served on ``metrics.port`` (127.0.0.1) when it is set.
"""

from __future__ import annotations

from replicator.gc_tuning import quiet_start, tune_for_throughput

# Before the imports below, which are most of the start-up.
quiet_start("trep-run", "trep/runner.py")

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click
from prometheus_client import CollectorRegistry, start_http_server

from consumers.factory import build_runtime
from replicator.zk import ZkHealth, connect
from replicator.zk_metrics import ZkCollector
from replicator.zk_session_slot import claim_slot
from trep.config import ConfigError, ServiceConfig, load_config

if TYPE_CHECKING:
    from extractor.service import Extractor

log = logging.getLogger("trep-run")


class Runner:
    """Starts the chosen components, stops them together."""

    def __init__(self, cfg: ServiceConfig, *, extractor: bool, consumers: list[str]) -> None:
        self.cfg = cfg
        self.registry = CollectorRegistry()
        zk = cfg.zookeeper
        self.slot = claim_slot(zk, cfg.service, "consumers")
        self.zk = connect(zk.hosts, zk.timeout_s)
        if self.slot is not None:
            self.slot.follow(self.zk)
        self.zk_health = ZkHealth(self.zk)
        self.registry.register(ZkCollector(self.zk_health, cfg.service, "consumers"))
        self.extractor = _extractor(cfg, self.registry) if extractor else None
        self.runtimes = [build_runtime(cfg, name, cfg.consumers[name], self.zk, self.registry,
                                       self.zk_health) for name in consumers]
        self.failures: list[str] = []
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()

    def start(self) -> None:
        if self.cfg.metrics.port:
            start_http_server(self.cfg.metrics.port, addr="127.0.0.1", registry=self.registry)
        if self.extractor is not None:
            self._spawn("extractor", self.extractor.run)
        for runtime in self.runtimes:
            self._spawn(f"consumer {runtime.name}", runtime.run, fatal=True)

    def _spawn(self, name: str, target: object, *, fatal: bool = False) -> None:
        """Run ``target`` in a thread. ``fatal``: its death stops the whole process.

        The extractor publishes OFFLINE:ERROR before it stops, and the consumer groups go
        on applying what the THL holds. A consumer runtime never ends by itself: if one
        does, it is a bug, and a process that looked alive with a dead group would hide it,
        so the runner stops everything and exits non-zero for its supervisor to see.
        """
        def run() -> None:
            try:
                target()  # type: ignore[operator]
            except Exception as exc:
                log.exception("%s stopped: %s", name, exc)
                self.failures.append(f"{name}: {exc}")
                if fatal:
                    self.stop()
            else:
                if fatal and not self._stopped.is_set():
                    self.failures.append(f"{name}: ended by itself")
                    self.stop()

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stopped.set()
        if self.extractor is not None:
            self.extractor.stop()
        for runtime in self.runtimes:
            runtime.stop()

    def wait(self) -> None:
        """Until stop() and every component finished (or every component ended by itself)."""
        while any(t.is_alive() for t in self._threads):
            for t in self._threads:
                t.join(0.5)
        self.zk_health.closing()
        self.zk.stop()
        self.zk.close()
        if self.slot is not None:
            self.slot.release()


def _extractor(cfg: ServiceConfig, registry: CollectorRegistry) -> Extractor:
    """The service's extractor, its metrics registered.

    Imported here, not at the top: the extractor's modules (its DDL parser above all) take
    about a third of a consumer-only process's start-up, which pays it for nothing."""
    from extractor.metrics import ExtractorCollector
    from extractor.service import Extractor

    made = Extractor(cfg, cfg.extractor)
    registry.register(ExtractorCollector(made, cfg.service))
    return made


@click.command()
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path), required=True,
              help="Service configuration (YAML).")
@click.option("--extractor/--no-extractor", default=True, show_default=True,
              help="Run the service's extractor.")
@click.option("--consumer", "only", multiple=True,
              help="Run only this consumer group (repeatable; default: all configured).")
@click.option("--no-consumers", is_flag=True, help="Run no consumer group.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(config_path: Path, extractor: bool, only: tuple[str, ...], no_consumers: bool,
         verbose: bool) -> None:
    """Run a replicator service: its extractor and its consumer groups."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    try:
        cfg = load_config(config_path)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    unknown = [g for g in only if g not in cfg.consumers]
    if unknown:
        click.echo(f"error: {config_path}: no consumer group {', '.join(unknown)} "
                   f"(configured: {', '.join(cfg.consumers) or 'none'})", err=True)
        sys.exit(2)
    groups = [] if no_consumers else list(only or cfg.consumers)
    try:
        runner = Runner(cfg, extractor=extractor, consumers=groups)
    except ConfigError as exc:
        click.echo(f"error: {config_path}: {exc}", err=True)
        sys.exit(2)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    signal.signal(signal.SIGINT, lambda *_: runner.stop())
    tune_for_throughput()
    runner.start()
    runner.wait()
    if runner.failures:
        click.echo("error: " + "; ".join(runner.failures), err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
