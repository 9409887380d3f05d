"""``thl``: inspect a service's THL topic, with Tungsten's command words.

    thl list -seqno N | -low A -high B | -last N   [--json]
    thl info
    thl index [-samples N]
    thl filter-test -low A -high B (-group G | -stage extract)
    thl export -low A -high B [-table s.t ...] --format parquet|csv|jsonl -o FILE

The topic comes from ``-c service.yml``, or ``-service NAME`` (topic ``thl.NAME``) with
``-bootstrap`` (default ``$TREP_KAFKA__BOOTSTRAP_SERVERS`` or 127.0.0.1:19092). Without
``-c``, the Kafka settings come from the environment like a service's (``TREP_KAFKA__...``,
security included). A broker that refuses the credentials or the certificate, or does not
answer, is one line on stderr naming it, and exit status 1.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from replicator.config import KafkaConfig, ServiceSettings, validation_problems
from replicator.control import consumer_groups
from replicator.filters import (
    FilterError,
    ItemFilter,
    ReplicateFilter,
    TrackingSchemaFilter,
    build_chain,
)
from replicator.progress import RunProgress
from replicator.zk import ServiceNodes, connect
from thl_topics.admin import describe_configs
from thl_topics.client import LIBRDKAFKA_LOG, check_access, new_admin
from thl_topics.errors import ThlError
from thl_topics.event import ThlEvent
from thl_topics.purge import plan_purge
from thl_topics.purge import purge as do_purge
from thl_topics.reader import ThlReader
from thl_topics.summary import summarize
from trep.config import ConfigError, ServiceConfig, load_config
from trep.thl_format import event_json, format_error, format_event


class _Ctx:
    def __init__(self, kafka: dict[str, Any], topic: str, timeout: float,
                 cfg: ServiceConfig | None = None) -> None:
        self.kafka = kafka
        #: The service file, when -c named one (filter-test needs its filters).
        self.cfg = cfg
        self.topic = topic
        self.timeout = timeout

    def reader(self) -> ThlReader:
        # A quick metadata request first: a refused login or an untrusted certificate is
        # reported at once, not after a read times out as if the broker were down.
        check_access(self.kafka, self.timeout)
        return ThlReader(self.kafka, self.topic, poll_timeout=self.timeout)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path),
              help="Service configuration (YAML): bootstrap servers and THL topic.")
@click.option("-service", "--service", help="Service name: the topic is thl.<service>.")
@click.option("-topic", "--topic", help="THL topic name (overrides the service's).")
@click.option("-bootstrap", "--bootstrap", help="Kafka bootstrap servers.")
@click.option("-timeout", "--timeout", type=float, default=10.0, show_default=True,
              help="Seconds to wait for Kafka to answer.")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, service: str | None, topic: str | None,
        bootstrap: str | None, timeout: float) -> None:
    """Inspect the Transaction History Log of a service."""
    if config_path is not None:
        try:
            cfg = load_config(config_path)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
        kafka = (cfg.kafka.client() if bootstrap is None
                 else cfg.kafka.client(**{"bootstrap.servers": bootstrap}))
        ctx.obj = _Ctx(kafka, topic or cfg.thl_topic, timeout, cfg)
        return
    topic = topic or (f"thl.{service}" if service else None)
    if topic is None:
        raise click.UsageError("name the THL: -c service.yml, -service NAME or -topic TOPIC")
    try:
        # The service name plays no part in how to reach Kafka.
        env_kafka: KafkaConfig = ServiceSettings(service="thl").kafka
    except ValidationError as exc:
        raise click.ClickException(str(validation_problems("environment", exc))) from exc
    ctx.obj = _Ctx(env_kafka.client() if bootstrap is None
                   else env_kafka.client(**{"bootstrap.servers": bootstrap}), topic, timeout)


@cli.command("list")
@click.option("-seqno", "--seqno", type=int, help="One transaction.")
@click.option("-low", "--low", type=int, help="First seqno of a range.")
@click.option("-high", "--high", type=int, help="Last seqno of a range (inclusive).")
@click.option("-last", "--last", type=int, help="The last N transactions.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_obj
def list_(obj: _Ctx, seqno: int | None, low: int | None, high: int | None, last: int | None,
          as_json: bool) -> None:
    """Print THL events in Tungsten's layout (or JSON)."""
    with obj.reader() as reader:
        lo_off, hi_off = reader.watermarks()
        if seqno is not None:
            low = high = seqno
        if last is not None:
            tail = reader.tail()
            if tail is None:
                return
            low, high = max(0, tail.seqno - last + 1), tail.seqno
        start = reader.offset_of(low) if low is not None else lo_off
        failures = 0
        for rec in reader.records(start, hi_off):
            if high is not None and rec.seqno > high:
                break
            if rec.event is None:
                failures += 1
                if as_json:
                    click.echo(json.dumps({"seqno": rec.seqno, "fragno": rec.fragno,
                                           "offset": rec.offset, "error": str(rec.error)}))
                else:
                    click.echo(format_error(rec))
                    click.echo()
                continue
            if as_json:
                click.echo(json.dumps(event_json(rec.event), ensure_ascii=False))
            else:
                click.echo(format_event(rec.event))
                click.echo()
        if failures:
            click.echo(f"{failures} record(s) could not be decoded", err=True)
            sys.exit(1)


@cli.command("filter-test")
@click.option("-low", "--low", type=int, required=True, help="First seqno of the range.")
@click.option("-high", "--high", type=int, required=True,
              help="Last seqno of the range (inclusive).")
@click.option("-group", "--group", help="Apply this consumer group's filters.")
@click.option("-stage", "--stage", type=click.Choice(["extract"]),
              help="Apply the extractor's filters instead (to events already extracted).")
@click.pass_obj
def filter_test(obj: _Ctx, low: int, high: int, group: str | None, stage: str | None) -> None:
    """Dry run: what a filter chain would do to a seqno range, as a diff per event.

    Reads the THL only: no target and no position is touched. Edit the filters in the
    service file, run this, and switch them on when the diff is what you want.
    """
    if obj.cfg is None:
        raise click.UsageError("filter-test reads the filters from the service file: -c FILE")
    if (group is None) == (stage is None):
        raise click.UsageError("name one stage: -group G or -stage extract")
    try:
        apply = _stage_filters(obj.cfg, group)
    except (KeyError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    changed = events = 0
    with obj.reader() as reader:
        _, end = reader.watermarks()
        for rec in reader.records(reader.offset_of(low), end):
            if rec.seqno > high:
                break
            if rec.event is None:
                click.echo(format_error(rec))
                continue
            events += 1
            before = format_event(rec.event).splitlines()
            try:
                result = apply(rec.event)
            except FilterError as exc:
                click.echo(f"SEQ# = {rec.seqno} / FRAG# = {rec.fragno}: {exc}")
                sys.exit(1)
            after = format_event(result).splitlines() if result is not None else []
            if after == before:
                click.echo(f"SEQ# = {rec.seqno} / FRAG# = {rec.fragno}: unchanged")
                continue
            changed += 1
            label = f"seqno {rec.seqno} frag {rec.fragno}"
            for line in difflib.unified_diff(before, after, f"{label} (THL)",
                                             f"{label} (filtered)", lineterm="", n=1):
                click.echo(line)
    click.echo(f"{events} event(s) read, {changed} changed; nothing was written")


def _stage_filters(cfg: ServiceConfig, group: str | None) -> Callable[[ThlEvent],
                                                                      ThlEvent | None]:
    """The replicate/ignore filter and the chain of one stage, as one function."""
    if group is not None:
        if group not in cfg.consumers:
            raise KeyError(f"no consumer group {group!r} in the service file "
                           f"(configured: {', '.join(cfg.consumers) or 'none'})")
        filters = cfg.consumers[group].filters
        items: ItemFilter = ReplicateFilter(filters.replicate, filters.ignore)
        chain = build_chain(filters.chain)
    else:
        filters = cfg.extractor.filters
        items = TrackingSchemaFilter(ReplicateFilter(filters.replicate, filters.ignore),
                                     cfg.tracking_schema)
        chain = build_chain(filters.chain).around(cfg.tracking_schema)

    def apply(event: ThlEvent) -> ThlEvent | None:
        kept = [item for item in event.data if items.keeps_item(item)]
        event = dataclasses.replace(event, data=kept)
        return chain(event) if chain and kept else event

    return apply


@cli.command()
@click.option("-seqno", "--seqno", "seqno", type=int, required=True,
              help="Delete every event below this seqno (it is kept).")
@click.option("--force", "force", multiple=True,
              help="A consumer group you accept to break (repeatable).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def purge(obj: _Ctx, seqno: int, force: tuple[str, ...], yes: bool) -> None:
    """Delete THL events below a seqno, never past a consumer group's position."""
    if obj.cfg is None:
        raise click.UsageError("purge reads the consumer groups' positions: -c FILE")
    positions = group_positions(obj.cfg)
    unknown = [g for g in force if g not in positions]
    if unknown:
        raise click.UsageError(f"--force names unknown group(s) {', '.join(unknown)} "
                               f"(known: {', '.join(positions) or 'none'})")
    with obj.reader() as reader:
        plan = plan_purge(reader, seqno, positions)
    if plan.first_kept is None or plan.first_kept >= seqno:
        click.echo(f"nothing to purge: the first seqno kept is {plan.first_kept}")
        return
    for group, pos in sorted(positions.items()):
        mark = " (would break: needs earlier events)" if group in plan.broken else ""
        click.echo(f"group {group}: applied seqno {pos}{mark}")
    if not yes:
        click.confirm(f"Delete every event of {obj.topic} below seqno {seqno} (offsets below "
                      f"{plan.offset})?", abort=True)
    try:
        do_purge(new_admin(obj.kafka)[0], obj.topic, plan, force)
    except ThlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"purged {obj.topic} below seqno {seqno}: first seqno kept is {seqno}")


def group_positions(cfg: ServiceConfig) -> dict[str, int]:
    """Every consumer group of the service (configured or registered) and its applied seqno
    as mirrored in ZooKeeper (-1: none, i.e. it needs the THL from its start)."""
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s)
    try:
        nodes = ServiceNodes(zk, cfg.zookeeper.root, cfg.service)
        groups = sorted({*cfg.consumers, *consumer_groups(zk, cfg.zookeeper.root, cfg.service)})
        out = {}
        for group in groups:
            pos = nodes.read_position(f"consumers/{group}")
            out[group] = -1 if pos is None else pos.seqno
        return out
    finally:
        zk.stop()
        zk.close()


@cli.command()
@click.pass_obj
def info(obj: _Ctx) -> None:
    """First and last seqno, epochs seen, topic settings, size."""
    with obj.reader() as reader:
        found = summarize(reader)
    low, high, records, size, epochs = (found.low, found.high, found.records, found.size,
                                        found.epochs)
    first, last = found.first, found.last
    admin, _ = new_admin(obj.kafka)
    configs = describe_configs(admin, obj.topic, obj.timeout)
    click.echo(f"topic = {obj.topic}")
    click.echo(f"min seqno = {first if first is not None else '-'} (first seqno kept)")
    click.echo(f"max seqno = {last if last is not None else '-'}")
    click.echo(f"offsets = {low}..{high}  records = {records}  value bytes = {size}")
    click.echo("epochs = " + ", ".join(f"{e} ({n} events)" for e, n in sorted(epochs.items())))
    for key in ("cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes",
                "min.insync.replicas", "message.timestamp.type"):
        click.echo(f"{key} = {configs.get(key)}")


@cli.command()
@click.option("-samples", "--samples", type=int, default=10, show_default=True)
@click.pass_obj
def index(obj: _Ctx, samples: int) -> None:
    """Seqno-to-offset samples across the topic (what a seek by seqno searches)."""
    with obj.reader() as reader:
        low, high = reader.watermarks()
        seen = set()
        click.echo(f"{'offset':>12}  {'seqno':>12}")
        for k in range(samples):
            probe = low + (high - low) * k // max(samples, 1)
            found = reader.sample(probe)
            if found is None or found in seen:
                continue
            seen.add(found)
            click.echo(f"{found[0]:>12}  {found[1]:>12}")


@cli.command()
@click.option("-low", "--low", type=int, required=True, help="First seqno.")
@click.option("-high", "--high", type=int, required=True, help="Last seqno (inclusive).")
@click.option("-table", "--table", "tables", multiple=True,
              help="Only this schema.table (wildcards *, repeatable).")
@click.option("--format", "fmt", type=click.Choice(["parquet", "csv", "jsonl"]),
              default="parquet", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="File to write (replaced).")
@click.pass_obj
def export(obj: _Ctx, low: int, high: int, tables: tuple[str, ...], fmt: str,
           output: Path) -> None:
    """Write the row changes of seqnos LOW..HIGH to a Parquet, CSV or JSON-lines file.

    One row per row change: seqno, epoch, commit_time (UTC), schema, table, op, row, and
    key/before/after as JSON text (DECIMAL and big integers as exact text, binary as
    base64). A seqno missing from the range is an error, not a shorter file.
    """
    from thl_topics.row_changes import ChangeReader
    from trep.export import ChangeFileWriter

    if high < low:
        raise click.UsageError("-high must be at least -low")
    # Off a terminal the progress comes as plain log lines on stderr.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    check_access(obj.kafka, obj.timeout)
    with ChangeReader(obj.kafka, obj.topic) as thl, \
            RunProgress(f"export {obj.topic}", low, high) as progress, \
            ChangeFileWriter(output, fmt) as writer:
        for change in thl.range(low, high + 1, tables,
                                progress=lambda seqno, rows: progress.advance_to(seqno, rows)):
            writer.add(change)
    click.echo(f"{writer.count} row change(s) of seqnos {low}..{high} written to {output}",
               err=True)


def main() -> None:
    """Entry point of the ``thl`` command."""
    # librdkafka's own lines (each failed connection attempt) would bury the one-line
    # error below; that error carries their reason.
    LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
    LIBRDKAFKA_LOG.propagate = False
    try:
        cli()
    except ThlError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
