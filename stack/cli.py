"""``trep-stack``: install, start, stop and inspect the local servers.

Used by the Makefile (``make stack-up`` / ``stack-down`` / ``stack-status``) and the demo.
"""

from __future__ import annotations

import sys
import time

import typer
from rich.console import Console
from rich.table import Table

from stack import services
from stack.errors import StackError
from stack.service import Service

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Local servers of the replicator: MariaDB, PostgreSQL, Kafka, "
                       "ZooKeeper, Elasticsearch, FerretDB and Spark.")
# Wide enough for the status table when output goes to a file or CI log.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True)

NAMES = typer.Argument(None, help=f"services (default: all): {', '.join(services.NAMES)}")


def _select(names: list[str] | None) -> list[Service]:
    try:
        return services.select(names)
    except KeyError as exc:
        err.print(f"[red]error:[/red] {exc.args[0]}")
        raise typer.Exit(2) from exc


@app.command()
def install(names: list[str] | None = NAMES) -> None:
    """Download and prepare the servers without starting them."""
    for svc in _select(names):
        _step(svc.name, "install", svc.install)


@app.command()
def up(names: list[str] | None = NAMES) -> None:
    """Install (if needed) and start the servers, waiting until each answers."""
    for svc in _select(names):
        _step(svc.name, "start", svc.start)
    status(names)


@app.command()
def down(names: list[str] | None = NAMES) -> None:
    """Stop the servers (data stays under the run directory)."""
    for svc in reversed(_select(names)):
        _step(svc.name, "stop", svc.stop)


@app.command()
def status(names: list[str] | None = NAMES) -> None:
    """Print a table: service, port, up/down, version. Exits 1 if any is down."""
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
        raise typer.Exit(1)


def _step(name: str, verb: str, action: object) -> None:
    started = time.monotonic()
    with console.status(f"{verb} {name} ..."):
        try:
            action()  # type: ignore[operator]
        except StackError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from exc
    console.print(f"{verb} {name}: ok ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    sys.exit(app())
