"""PostgreSQL from Debian's package, as a private cluster owned by the service user."""

from __future__ import annotations

import glob
import shutil
import signal
from pathlib import Path

import psycopg

from stack import process
from stack.errors import StackError
from stack.fetch import apt_install
from stack.service import TcpService
from stack.settings import HOST
from stack.users import hand_over, service_user


def _bin(name: str) -> str:
    """The server binaries live in a versioned folder, not on PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise StackError("postgresql", f"{name} not found under /usr/lib/postgresql")
    return found[-1]


class PostgreSQL(TcpService):
    """``postgres`` on 127.0.0.1 with trust auth for the ``postgres`` role."""

    name = "postgresql"
    start_timeout = 60.0


    def install(self) -> None:
        apt_install(self.name, ["postgresql"], ["/usr/lib/postgresql/*/bin/postgres"])

    def launch(self) -> None:
        data = self.dir / "data"
        # Unix socket paths are limited to ~100 bytes; the run dir may be deeper than that.
        sock = Path(f"/tmp/trep-pg-{self.port}")  # noqa: S108
        sock.mkdir(exist_ok=True)
        hand_over(self.dir)
        hand_over(sock)
        user = service_user()
        if not (data / "PG_VERSION").exists():
            shutil.rmtree(data, ignore_errors=True)
            process.run(self.name, [_bin("initdb"), "-D", str(data), "-U", "postgres",
                                    "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"],
                        log=self.log, user=user)
        process.spawn(self.name, [
            _bin("postgres"), "-D", str(data), "-p", str(self.port), "-k", str(sock),
            "-c", f"listen_addresses={HOST}", "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "max_connections=200",
        ], log=self.log, pid_file=self.pid_file, user=user)

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
        """A connection as the ``postgres`` superuser."""
        return psycopg.connect(host=HOST, port=self.port, user="postgres", dbname=dbname,
                               connect_timeout=2, autocommit=True)

    def stop(self) -> None:
        """Fast shutdown (SIGINT): clients are disconnected and the server checkpoints.
        SIGTERM would be a "smart" shutdown, waiting for every client (a replicator's
        pooled connection) to leave, 30 s of a stop that looked like a crash."""
        process.stop_pid(self.pid_file, first=signal.SIGINT)

    def ready(self) -> bool:
        try:
            with self.connect() as conn:
                row = conn.execute("SELECT 1").fetchone()
                return row == (1,)
        except psycopg.Error:
            return False

    def version(self) -> str:
        with self.connect() as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "?"


def service() -> PostgreSQL:
    """The PostgreSQL target."""
    return PostgreSQL()
