"""``trep-extractor -c service.yml``: run one extractor until SIGTERM/SIGINT."""

from __future__ import annotations

from replicator.gc_tuning import quiet_start, tune_for_throughput

# Before the imports below, which are most of the start-up.
quiet_start("trep-extractor", "trep/extract.py")

import logging
import signal
import sys
from pathlib import Path

import click

from extractor.errors import ExtractorError
from extractor.service import Extractor
from thl_topics.errors import ThlError
from thl_topics.producer import ProducerFenced
from trep.config import ConfigError, load_config


@click.command()
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path), required=True,
              help="Service configuration (YAML).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(config_path: Path, verbose: bool) -> None:
    """Extract the source binlog into the service's THL topic."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(config_path)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    extractor = Extractor(cfg, cfg.extractor)
    signal.signal(signal.SIGTERM, lambda *_: extractor.stop())
    signal.signal(signal.SIGINT, lambda *_: extractor.stop())
    tune_for_throughput()
    try:
        extractor.run()
    except ProducerFenced as exc:
        click.echo(f"error: {exc}; this instance is no longer the leader", err=True)
        sys.exit(3)
    except (ExtractorError, ThlError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
