"""``trep-stack``: install, start, stop and inspect the local servers.

Used by the Makefile (``make stack-up`` / ``stack-down`` / ``stack-status``) and the demo.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
import time

import click
from rich.console import Console
from rich.table import Table

from stack import services, settings
from stack.errors import StackError
from stack.service import Service

# Kept as written ("\\b"): click would otherwise break service names at their hyphens.
NAMES_HELP = "\b\n" + textwrap.fill(f"NAMES: services (default: all): {', '.join(services.NAMES)}",
                                   76, break_on_hyphens=False)


class _Commands(click.Group):
    """Commands listed in the order they are defined (install, up, down, status), each with
    its whole help line."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.short_help = cmd.short_help or cmd.help
        super().add_command(cmd, name)


@click.group(cls=_Commands, no_args_is_help=True,
             help="Local servers of the replicator: MariaDB, PostgreSQL, Kafka, ZooKeeper, "
                  "Elasticsearch, FerretDB and Spark.")
def app() -> None:
    """The ``trep-stack`` command group."""


# Wide enough for the status table when output goes to a file or CI log.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)


def _select(names: tuple[str, ...]) -> list[Service]:
    try:
        return services.select(list(names))
    except KeyError as exc:
        err.print(f"[red]error:[/red] {exc.args[0]}")
        raise click.exceptions.Exit(2) from exc


@app.command(epilog=NAMES_HELP)
@click.argument("names", nargs=-1)
def install(names: tuple[str, ...]) -> None:
    """Download and prepare the servers without starting them."""
    for svc in _select(names):
        _step(svc.name, "install", svc.install)


@app.command(epilog=NAMES_HELP)
@click.argument("names", nargs=-1)
def up(names: tuple[str, ...]) -> None:
    """Install (if needed) and start the servers, waiting until each answers."""
    for svc in _select(names):
        _step(svc.name, "start", svc.start)
    _status(names)


@app.command(epilog=NAMES_HELP)
@click.argument("names", nargs=-1)
def down(names: tuple[str, ...]) -> None:
    """Stop the servers (data stays under the run directory), and the demo's console."""
    if not names:
        _stop_demo_console()
    # Bare: every server, the on-demand ones a test session may have left running too.
    chosen = _select(names) if names else [services.get(n) for n in services.NAMES]
    for svc in reversed(chosen):
        _step(svc.name, "stop", svc.stop)


def _stop_demo_console() -> None:
    """The console ``make demo`` leaves running (its pid in the run directory)."""
    pid_file = settings.RUN_DIR / "console.pid"
    if not pid_file.exists():
        return
    with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        console.print("stop console: ok")
    pid_file.unlink(missing_ok=True)


@app.command(epilog=NAMES_HELP)
@click.argument("names", nargs=-1)
def status(names: tuple[str, ...]) -> None:
    """Print a table: service, port, up/down, version. Exits 1 if any is down."""
    _status(names)


def _status(names: tuple[str, ...]) -> None:
    table = Table("service", "port", "state", "version", "log")
    all_up = True
    for svc in _select(names):
        st = svc.status()
        all_up &= st.up
        table.add_row(st.name, str(st.port) if st.port else "local",
                      "[green]up[/green]" if st.up else "[red]down[/red]", st.version,
                      str(st.log))
    console.print(table)
    if not all_up:
        raise click.exceptions.Exit(1)


def _step(name: str, verb: str, action: object) -> None:
    started = time.monotonic()
    with console.status(f"{verb} {name} ..."):
        try:
            action()  # type: ignore[operator]
        except StackError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise click.exceptions.Exit(1) from exc
    console.print(f"{verb} {name}: ok ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    app()
