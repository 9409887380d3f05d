"""``trep-warehouse``: the warehouse consumer groups on a Spark cluster, and Delta by seqno.

    trep-warehouse -c service.yml run [-group G ...]          # spark-submit-able
    trep-warehouse -c service.yml version -group G -table s.t -seqno N [--history]
    trep-warehouse -c service.yml rebuild -group G -table s.t -seqno N -to URI

``run`` applies the service's warehouse groups (no extractor), exactly like ``trep-run
--no-extractor --consumer G``, in a driver that ``spark-submit`` starts, so the same group
runs on a standalone, YARN or Kubernetes cluster::

    PYTHONPATH=/opt/tungsten-kafka spark-submit --master spark://host:7077 \\
      --packages io.delta:delta-spark_2.13:4.0.0 \\
      /opt/tungsten-kafka/trep/warehouse.py -c service.yml run -group warehouse

The master given to spark-submit wins over the group's ``spark.master``; the executors need
this package and its dependencies (the same virtualenv, or ``--py-files``).
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click

from consumers.warehouse.config import WarehouseTarget
from trep.config import ConfigError, ServiceConfig, load_config

log = logging.getLogger("trep-warehouse")


def _warehouse_groups(cfg: ServiceConfig) -> list[str]:
    return [name for name, group in cfg.consumers.items()
            if isinstance(group.target, WarehouseTarget)]


def _target(cfg: ServiceConfig, group: str | None) -> tuple[str, WarehouseTarget]:
    groups = _warehouse_groups(cfg)
    if group is None:
        if len(groups) != 1:
            raise click.UsageError(f"name the group with -group (warehouse groups: "
                                   f"{', '.join(groups) or 'none'})")
        group = groups[0]
    if group not in groups:
        raise click.UsageError(f"{group!r} is not a warehouse group of {cfg.service} "
                               f"(warehouse groups: {', '.join(groups) or 'none'})")
    target = cfg.consumers[group].target
    if not isinstance(target, WarehouseTarget):  # _warehouse_groups picked it: cannot be
        raise click.UsageError(f"{group!r} is not a warehouse group")
    return group, target


def _split(table: str) -> tuple[str, str]:
    schema, dot, name = table.partition(".")
    if not dot or not schema or not name:
        raise click.UsageError(f"-table {table!r}: give schema.table")
    return schema, name


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path),
              required=True, envvar="TREP_CONFIG", help="Service configuration (YAML).")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.pass_context
def cli(ctx: click.Context, config_path: Path, verbose: bool) -> None:
    """Warehouse groups (Spark + Delta) of a replicator service."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(threadName)s %(name)s: "
                               "%(message)s")
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        ctx.obj = load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


@cli.command()
@click.option("-group", "--group", "groups", multiple=True,
              help="A warehouse group (repeatable; default: every warehouse group).")
@click.pass_obj
def run(cfg: ServiceConfig, groups: tuple[str, ...]) -> None:
    """Apply warehouse groups until SIGTERM (the spark-submit entry point)."""
    from trep.runner import Runner

    known = _warehouse_groups(cfg)
    chosen = list(groups or known)
    unknown = [g for g in chosen if g not in known]
    if unknown or not chosen:
        raise click.UsageError(f"no warehouse group {', '.join(unknown)} in {cfg.service} "
                               f"(warehouse groups: {', '.join(known) or 'none'})")
    runner = Runner(cfg, extractor=False, consumers=chosen)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop())
    signal.signal(signal.SIGINT, lambda *_: runner.stop())
    runner.start()
    runner.wait()
    if runner.failures:
        click.echo("error: " + "; ".join(runner.failures), err=True)
        sys.exit(1)


@cli.command()
@click.option("-group", "--group", default=None, help="The warehouse group.")
@click.option("-table", "--table", required=True, help="Source table, schema.table.")
@click.option("-seqno", "--seqno", type=int, required=True)
@click.option("--history", "show", is_flag=True, help="Also list every commit's seqnos.")
@click.pass_obj
def version(cfg: ServiceConfig, group: str | None, table: str, seqno: int,
            show: bool) -> None:
    """The Delta version of a table that holds SEQNO (time travel by seqno)."""
    from consumers.warehouse import session as spark_sessions
    from consumers.warehouse.history import commit_ranges, version_for_seqno
    from consumers.warehouse.naming import table_ref

    _, target = _target(cfg, group)
    schema, name = _split(table)
    ref = table_ref(target, schema, name)
    spark = spark_sessions.acquire(target.spark)
    try:
        commits = commit_ranges(spark, ref)
    finally:
        spark_sessions.release(spark)
    if show:
        for c in commits:
            click.echo(f"version {c.version:>6}  generation {c.generation:>3}  "
                       f"seqnos {c.low}..{c.high}  {c.operation}")
    found = version_for_seqno(commits, seqno)
    if found is None:
        click.echo(f"{table} has no version at seqno {seqno} (its first change is later, "
                   "or it was never written by this group)", err=True)
        sys.exit(1)
    click.echo(found.describe())
    click.echo(f"read it with: spark.read.format('delta').option('versionAsOf', "
               f"{found.commit.version}).load('{ref}')")


@cli.command()
@click.option("-group", "--group", default=None, help="The warehouse group (its settings).")
@click.option("-table", "--table", required=True, help="Source table, schema.table.")
@click.option("-seqno", "--seqno", type=int, required=True, help="As of this seqno.")
@click.option("-to", "--to", "to", required=True, help="New Delta table path (URI).")
@click.option("--batch-rows", type=int, default=100_000, show_default=True)
@click.pass_obj
def rebuild(cfg: ServiceConfig, group: str | None, table: str, seqno: int, to: str,
            batch_rows: int) -> None:
    """Build TABLE as it was at SEQNO from the THL, into a new Delta path."""
    from consumers.warehouse import session as spark_sessions
    from consumers.warehouse.history import rebuild as rebuild_table
    from replicator.progress import RunProgress
    from thl_topics.row_changes import ChangeReader

    _, target = _target(cfg, group)
    schema, name = _split(table)
    with ChangeReader(cfg.kafka.client(), cfg.thl_topic) as thl:
        bounds = thl.bounds()
    if bounds is None or bounds[1] < seqno:
        raise click.ClickException(f"the THL {cfg.thl_topic} does not reach seqno {seqno}")
    spark = spark_sessions.acquire(target.spark)
    try:
        with RunProgress(f"rebuild {table}", bounds[0], seqno) as progress:
            rows = rebuild_table(spark, cfg.kafka.client(), cfg.thl_topic, schema, name,
                                 seqno, to, target, batch_rows=batch_rows,
                                 progress=lambda s, r: progress.advance_to(s, r))
    finally:
        spark_sessions.release(spark)
    click.echo(f"{table} as of seqno {seqno}: {rows} row change(s) applied into {to}")


def main() -> None:
    """Entry point of ``trep-warehouse``."""
    cli()


if __name__ == "__main__":
    main()
