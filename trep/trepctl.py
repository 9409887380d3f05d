"""``trepctl``: drive a service's consumer groups over ZooKeeper, as Tungsten users do.

The command writes a desired state; the services watch it and publish their status back.
Options follow Tungsten's spelling (``-group``, ``-name``) with ``--`` forms as aliases.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click
import sqlalchemy as sa
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from replicator.check_report import CheckBusy, Report, check_report, start_check
from replicator.control import (
    ComponentNodes,
    Desired,
    component_status,
    consumer_groups,
    parse_seqno_ranges,
    request,
)
from replicator.control import services as list_services
from replicator.requests import CheckRequest, ProvisionRequest, read_request, write_request
from replicator.source import source_engine
from replicator.state import State
from replicator.tracking import CommitSeqnoTable, tracking_metadata
from replicator.zk import connect
from trep.config import ConfigError, ServiceConfig, load_config

#: Fields shown first by ``status``, in Tungsten's order; the rest follow sorted.
_FIRST = ("state", "appliedLastSeqno", "appliedLastEventId", "appliedLastEpoch",
          "appliedLatency", "pendingError", "pendingErrorCode", "pendingErrorEventId",
          "pendingErrorSeqno", "pendingExceptionMessage")


class Ctx:
    """What every sub-command needs: the configuration and a ZooKeeper session."""

    def __init__(self, cfg: ServiceConfig) -> None:
        self.cfg = cfg
        self._zk: KazooClient | None = None

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            try:
                self._zk = connect(self.cfg.zookeeper.hosts, self.cfg.zookeeper.timeout_s)
            except KazooTimeoutError:
                _fail(f"ZooKeeper at {self.cfg.zookeeper.hosts} does not answer; is it up?")
        return self._zk

    def nodes(self, component: str) -> ComponentNodes:
        return ComponentNodes(self.zk, self.cfg.zookeeper.root, self.cfg.service, component)

    def groups(self, group: str | None) -> list[str]:
        known = sorted({*self.cfg.consumers,
                        *consumer_groups(self.zk, self.cfg.zookeeper.root, self.cfg.service)})
        if group is None:
            if not known:
                _fail(f"service {self.cfg.service} has no consumer group")
            return known
        if group not in known:
            _fail(f"service {self.cfg.service} has no consumer group {group!r} "
                  f"(known: {', '.join(known) or 'none'})")
        return [group]

    def close(self) -> None:
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()


def _fail(message: str, code: int = 1) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _group_option(fn: Any) -> Any:
    return click.option("-group", "--group", "group", default=None,
                        help="One consumer group (default: all of the service).")(fn)


@click.group()
@click.option("-c", "--config", "config_path", type=click.Path(path_type=Path),
              envvar="TREP_CONFIG", required=True, help="Service configuration (YAML).")
@click.pass_context
def cli(ctx: click.Context, config_path: Path) -> None:
    """Control a replicator service (Tungsten's trepctl over ZooKeeper)."""
    try:
        cfg = load_config(config_path)
    except ConfigError as exc:
        _fail(str(exc), 2)
        return
    state = Ctx(cfg)
    ctx.obj = state
    ctx.call_on_close(state.close)


@cli.command()
@click.pass_obj
def services(ctx: Ctx) -> None:
    """List the services registered in ZooKeeper."""
    for name in list_services(ctx.zk, ctx.cfg.zookeeper.root):
        click.echo(name)


def _status_of(ctx: Ctx, component: str) -> dict[str, Any]:
    return component_status(ctx.nodes(component))


def _all_status(ctx: Ctx, group: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"serviceName": ctx.cfg.service}
    if group is None:
        out["extractor"] = _status_of(ctx, "extractor")
    out["consumers"] = {g: _status_of(ctx, f"consumers/{g}") for g in ctx.groups(group)}
    return out


@cli.command()
@_group_option
@click.option("-channels", "--channels", "channels", is_flag=True,
              help="Each channel of the consumer groups (parallel apply): seqno, state, "
                   "shards.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(ctx: Ctx, group: str | None, channels: bool, as_json: bool) -> None:
    """State and positions of the extractor and each consumer group."""
    data = _all_status(ctx, group)
    if channels:
        _channel_status(data["consumers"], as_json)
        return
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    parts = [("extractor", data["extractor"])] if "extractor" in data else []
    parts += [(f"consumer {g}", s) for g, s in data["consumers"].items()]
    for title, fields in parts:
        click.echo(f"Processing status command ({title})...")
        click.echo(f"{'NAME':<25}VALUE\n{'----':<25}-----")
        keys = [k for k in _FIRST if k in fields] + sorted(
            k for k in fields if k not in _FIRST and k != "channelStatus")
        for key in keys:
            value = fields[key]
            click.echo(f"{key:<25}: {json.dumps(value) if isinstance(value, list) else value}")
        click.echo("Finished status command...")


def _channel_status(groups: dict[str, dict[str, Any]], as_json: bool) -> None:
    """``status -channels``: one line per channel of each group (Tungsten's tasks view)."""
    if as_json:
        click.echo(json.dumps({g: s.get("channelStatus") or [] for g, s in groups.items()},
                              indent=2, sort_keys=True))
        return
    for g, fields in groups.items():
        rows = fields.get("channelStatus")
        click.echo(f"Processing status -channels command (consumer {g})...")
        if not rows:
            click.echo(f"one channel (channels: 1): appliedLastSeqno "
                       f"{fields.get('appliedLastSeqno', -1)}, state "
                       f"{fields.get('state', 'unknown')}")
        else:
            click.echo(f"state {fields.get('state')}, appliedLastSeqno (lowest channel) "
                       f"{fields.get('appliedLastSeqno', -1)}, critical events "
                       f"{fields.get('criticalEvents', 0)}")
            click.echo(f"{'CHANNEL':<9}{'SEQNO':<12}{'STATE':<10}{'EVENTS':<10}{'QUEUED':<8}"
                       "SHARDS")
            for row in rows:
                click.echo(f"{row['channel']:<9}{row['appliedLastSeqno']:<12}"
                           f"{row['state']:<10}{row['appliedEvents']:<10}{row['queued']:<8}"
                           f"{', '.join(row['shards']) or '-'}")
        click.echo("Finished status command...")


def _request(ctx: Ctx, groups: list[str], change: Any) -> None:
    for g in groups:
        request(ctx.nodes(f"consumers/{g}"), change)


@cli.command()
@_group_option
@click.option("-skip-seqno", "--skip-seqno", "skip", default=None,
              help="Move past these seqnos without applying them: N, N,M or N-K.")
@click.option("-from-seqno", "--from-seqno", "from_seqno", type=int, default=None,
              help="Apply from this seqno, ignoring the stored position (replay).")
@click.pass_obj
def online(ctx: Ctx, group: str | None, skip: str | None, from_seqno: int | None) -> None:
    """Put consumer groups ONLINE (also clears OFFLINE:ERROR)."""
    try:
        skips = parse_seqno_ranges(skip) if skip else []
    except ValueError as exc:
        _fail(f"--skip-seqno: {exc}", 2)
        return
    if from_seqno is not None and from_seqno < 0:
        _fail("--from-seqno must be 0 or more", 2)

    def change(d: Desired) -> None:
        d.state = "ONLINE"
        d.skip_seqnos = sorted({*d.skip_seqnos, *skips})
        if from_seqno is not None:
            d.from_seqno = from_seqno
    _request(ctx, ctx.groups(group), change)


@cli.command()
@_group_option
@click.pass_obj
def offline(ctx: Ctx, group: str | None) -> None:
    """Take consumer groups OFFLINE at the next transaction boundary."""
    def change(d: Desired) -> None:
        d.state = "OFFLINE"
    _request(ctx, ctx.groups(group), change)


@cli.command()
@_group_option
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--timeout", type=float, default=60.0, show_default=True)
@click.pass_obj
def reset(ctx: Ctx, group: str | None, yes: bool, timeout: float) -> None:
    """Take groups OFFLINE and clear their stored positions (target and ZooKeeper)."""
    groups = ctx.groups(group)
    if not yes:
        click.confirm(f"Clear the positions of {', '.join(groups)} of service "
                      f"{ctx.cfg.service}? They will apply from the THL's start (or "
                      "--from-seqno) when next online", abort=True)

    def change(d: Desired) -> None:
        d.state = "OFFLINE"
        d.reset = True
        d.skip_seqnos = []
        d.from_seqno = None
    _request(ctx, groups, change)
    deadline = time.monotonic() + timeout
    for g in groups:
        nodes = ctx.nodes(f"consumers/{g}")
        if not nodes.alive():
            _fail(f"consumer group {g} is not running; the reset happens when it starts")
        while nodes.desired().reset:
            if time.monotonic() > deadline:
                _fail(f"consumer group {g} did not reset within {timeout} s")
            time.sleep(0.2)
        click.echo(f"{g}: position cleared")


@cli.command()
@click.option("-name", "--name", default="MASTER", show_default=True,
              help="Name recorded with the heartbeat.")
@click.pass_obj
def heartbeat(ctx: Ctx, name: str) -> None:
    """Write the source heartbeat table; the row travels through the THL to every target."""
    engine = source_engine(ctx.cfg.source)
    try:
        table = tracking_metadata(ctx.cfg.tracking_schema).tables[
            f"{ctx.cfg.tracking_schema}.heartbeat"]
        with engine.begin() as conn:
            CommitSeqnoTable(ctx.cfg.tracking_schema).create(conn)
            conn.execute(sa.text("SET time_zone = '+00:00'"))
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
            done = conn.execute(sa.update(table).where(table.c.id == 1).values(
                source_tstamp=now, name=name, salt=table.c.salt + 1))
            if done.rowcount == 0:
                conn.execute(sa.insert(table).values(id=1, source_tstamp=now, name=name,
                                                      salt=1))
    except sa.exc.DBAPIError as exc:
        _fail(f"cannot write the heartbeat on the source: {exc.orig}")
    finally:
        engine.dispose()
    click.echo(f"heartbeat {name} written at {now.isoformat()}Z")


@cli.command()
@click.option("-schema", "--schema", "schemas", multiple=True,
              help="Every table of this schema (repeatable).")
@click.option("-table", "--table", "tables", multiple=True,
              help="One table, schema.table (repeatable).")
@click.option("--no-wait", is_flag=True, help="Ask and return; follow with trepctl status.")
@click.option("-limit", "--limit", "timeout", type=float, default=0, show_default="forever",
              help="Seconds to wait at most.")
@click.pass_obj
def provision(ctx: Ctx, schemas: tuple[str, ...], tables: tuple[str, ...], no_wait: bool,
              timeout: float) -> None:
    """Publish the existing rows of tables through the THL (every table the extractor
    replicates when none is named), while replication goes on; show the progress."""
    pairs = []
    for name in tables:
        schema, dot, table = name.partition(".")
        if not dot or not schema or not table:
            _fail(f"-table {name!r}: use schema.table", 2)
        pairs.append([schema, table])
    current = read_request(ctx.zk, ctx.cfg)
    if current is not None and current.state in ("requested", "running"):
        _fail(f"provisioning {current.id} is {current.state} already "
              f"({current.rows_done}/{current.rows_total} rows); wait for it to finish")
    request = ProvisionRequest(tables=pairs, schemas=list(schemas))
    write_request(ctx.zk, ctx.cfg, request)
    click.echo(f"provisioning {request.id} requested")
    if not no_wait:
        _follow(ctx, request.id, timeout)


def _follow(ctx: Ctx, request_id: str, timeout: float) -> None:
    """Progress of a provisioning until it is done: a bar in a terminal, lines otherwise."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    deadline = time.monotonic() + timeout if timeout else None
    started = time.monotonic()
    tty = sys.stdout.isatty()
    progress = Progress(TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,.0f}/{task.total:,.0f} rows"),
                        TextColumn("{task.fields[rate]:,.0f} rows/s"), TimeRemainingColumn(),
                        disable=not tty)
    last_line = 0.0
    with progress:
        task = progress.add_task("provisioning", total=None, rate=0.0)
        while True:
            req = read_request(ctx.zk, ctx.cfg)
            if req is None or req.id != request_id:
                _fail(f"provisioning {request_id} was replaced or removed")
                return
            elapsed = max(time.monotonic() - started, 1e-6)
            rate = req.rows_done / elapsed
            total = max(req.rows_total, req.rows_done) or None
            progress.update(task, completed=req.rows_done, total=total, rate=rate,
                            description=f"provisioning {req.current or req.state}")
            if not tty and time.monotonic() - last_line >= 5:
                last_line = time.monotonic()
                eta = (f", ETA {(total - req.rows_done) / rate:.0f} s"
                       if total and rate > 0 else "")
                click.echo(f"provisioning {req.id}: {req.state} {req.current} "
                           f"{req.rows_done}/{req.rows_total} rows, {rate:.0f} rows/s{eta}")
            if req.state == "done":
                break
            if req.state == "failed":
                _fail(f"provisioning {req.id} failed: {req.message}")
            if deadline is not None and time.monotonic() > deadline:
                _fail(f"provisioning {req.id} not done within {timeout} s "
                      f"({req.rows_done}/{req.rows_total} rows)")
            time.sleep(0.5)
    click.echo(f"provisioning {request_id} done: {req.message}")


@cli.command()
@click.argument("tables", nargs=-1)
@click.option("-limit", "--limit", type=int, default=10_000, show_default=True,
              help="Rows per checked range.")
@click.option("-status", "--status", "show", is_flag=True,
              help="Show the results of the latest check, per group and table.")
@click.option("--no-wait", is_flag=True, help="Ask and return.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable -status output.")
@click.option("-timeout", "--timeout", type=float, default=600.0, show_default=True,
              help="Seconds to wait for every group's results.")
@click.pass_obj
def check(ctx: Ctx, tables: tuple[str, ...], limit: int, show: bool, no_wait: bool,
          as_json: bool, timeout: float) -> None:
    """Compare row ranges of tables (schema.table ...; default: every replicated one) on the
    source and on every consumer group's target, at the same point of the THL."""
    if show:
        _check_status(ctx, as_json)
        return
    pairs = []
    for name in tables:
        schema, dot, table = name.partition(".")
        if not dot or not schema or not table:
            _fail(f"{name!r}: use schema.table", 2)
        pairs.append([schema, table])
    if limit < 1:
        _fail("-limit must be 1 or more", 2)
    try:
        request = start_check(ctx.zk, ctx.cfg, pairs, limit)
    except CheckBusy as exc:
        _fail(str(exc))
        return
    click.echo(f"check {request.id} requested")
    if no_wait:
        return
    deadline = time.monotonic() + timeout
    while True:
        # One read of the request for both the report and the decision: a report made from
        # an earlier read (not yet resolved: no tables) and a later "done" printed nothing.
        req, report = _check_report(ctx)
        if req.id != request.id:
            _fail(f"check {request.id} was replaced")
            return
        if req.state == "failed":
            _fail(f"check {req.id} failed: {req.message}")
        if req.state == "done" and not any(t["state"] == "pending" for g in report.values()
                                            for t in g.values()):
            break
        if time.monotonic() > deadline:
            _print_check(report)
            _fail(f"check {req.id}: not every group reported within {timeout} s")
        time.sleep(0.5)
    _print_check(report)
    if any(t["state"] == "different" for g in report.values() for t in g.values()):
        sys.exit(3)


def _check_report(ctx: Ctx) -> tuple[CheckRequest, Report]:
    """The latest request and, per group and table: equal, different (with the key ranges),
    pending or unsupported."""
    req, report = check_report(ctx.zk, ctx.cfg, ctx.groups(None), ctx.nodes)
    if req is None:
        _fail("no check was ever requested")
    return req, report


def _print_check(report: Report) -> None:
    for group, tables in report.items():
        for name, result in tables.items():
            line = f"{group:<16} {name:<40} {result['state']}"
            if result["state"] == "equal":
                line += f" ({result['rows']} rows, {result['ranges']} range(s))"
            elif result["state"] == "pending":
                line += f" ({result['ranges']} ranges)"
            click.echo(line)
            for bad in result.get("different", []):
                click.echo(f"    range {bad['range']}: keys after {bad['after_key']} up to "
                           f"{bad['up_to_key']}: source {bad['source_rows']} rows, target "
                           f"{bad['target_rows']} rows")


def _check_status(ctx: Ctx, as_json: bool) -> None:
    _, report = _check_report(ctx)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        _print_check(report)


@cli.command()
@_group_option
@click.option("-applied", "--applied", "seqno", type=int, required=True,
              help="Wait until this seqno is applied.")
@click.option("-limit", "--limit", "timeout", type=float, default=300.0, show_default=True,
              help="Seconds to wait at most.")
@click.pass_obj
def wait(ctx: Ctx, group: str | None, seqno: int, timeout: float) -> None:
    """Wait until consumer groups applied ``seqno`` (exit 1 on error or timeout)."""
    groups = ctx.groups(group)
    deadline = time.monotonic() + timeout
    for _ in _until(deadline):
        statuses = {g: _status_of(ctx, f"consumers/{g}") for g in groups}
        for g, s in statuses.items():
            if s.get("state") == State.ERROR.value:
                _fail(f"{g} is OFFLINE:ERROR at seqno {s.get('pendingErrorSeqno')}: "
                      f"{s.get('pendingExceptionMessage')}")
        if all(s.get("appliedLastSeqno", -1) >= seqno for s in statuses.values()):
            click.echo(f"seqno {seqno} applied by {', '.join(groups)}")
            return
    _fail(f"seqno {seqno} not applied by {', '.join(groups)} within {timeout} s")


def _until(deadline: float) -> Iterator[None]:
    while time.monotonic() < deadline:
        yield
        time.sleep(0.2)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
