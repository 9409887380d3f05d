"""``trep-console``: the operator console in the browser, for the services whose files it
is given (and every other service registered in their ZooKeeper).

Read-only for everyone; actions need a login: users from ``TREP_CONSOLE_USERS``
(``name:scrypt$...``, made by ``trep-console hash-password``) or the token in
``TREP_CONSOLE_TOKEN``. Binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import getpass
import logging
import secrets
import threading
from pathlib import Path

import click
import uvicorn

from console.app import create_app
from console.auth import Credentials, hash_password
from console.registry import Registry
from replicator.zk import connect
from trep.config import ConfigError, load_config

#: Seconds between two lag samples of the chart.
SAMPLE_EVERY_S = 15.0


@click.group()
def main() -> None:
    """The operator console of replicator services."""


@main.command()
@click.option("-c", "--config", "configs", type=click.Path(path_type=Path), multiple=True,
              required=True, help="A service file (repeat for several services).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8090, show_default=True)
def serve(configs: tuple[Path, ...], host: str, port: int) -> None:
    """Serve the console."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        loaded = {c.service: c for c in (load_config(p) for p in configs)}
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    first = next(iter(loaded.values()))
    zk = connect(first.zookeeper.hosts, first.zookeeper.timeout_s)
    registry = Registry(zk, first.zookeeper.root, loaded)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_EVERY_S):
            try:
                registry.sample()
            except Exception as exc:  # a missed sample is only a gap in the chart
                logging.getLogger("console").warning("lag sample: %s", exc)

    threading.Thread(target=sample, name="lag sampler", daemon=True).start()
    credentials = Credentials.from_environment()
    app = create_app(registry, credentials, secrets.token_urlsafe(32))
    click.echo(f"trep-console on http://{host}:{port}/ "
               f"({'actions need a login' if credentials.any else 'read-only: no user'})")
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        stop.set()
        zk.stop()
        zk.close()


@main.command("hash-password")
def hash_password_command() -> None:
    """Print a password's hash for ``TREP_CONSOLE_USERS``."""
    click.echo(hash_password(getpass.getpass("password: ")))


if __name__ == "__main__":
    main()
