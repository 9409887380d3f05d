"""MariaDB from Debian's package, as private instances: the binlog source and a target."""

from __future__ import annotations

import shutil
import textwrap
from typing import Any

import pymysql

from stack import process
from stack.fetch import apt_install
from stack.service import TcpService
from stack.settings import HOST

#: Settings the extractor depends on: full row images with column names and primary keys.
SOURCE_BINLOG = """\
server-id = 1
log-bin = mariadb-bin
binlog-format = ROW
binlog-row-image = FULL
binlog-row-metadata = FULL
"""


class MariaDB(TcpService):
    """One ``mariadbd`` with its own datadir, port and socket. Root has no password on 127.0.0.1."""

    start_timeout = 60.0

    def __init__(self, name: str, server_id: int, binlog: bool) -> None:
        self.name = name
        self.server_id = server_id
        self.binlog = binlog


    @property
    def socket(self) -> str:
        # Unix socket paths are limited to ~100 bytes; the run dir may be deeper than that.
        return f"/tmp/trep-{self.name}-{self.port}.sock"  # noqa: S108

    def install(self) -> None:
        apt_install(self.name, ["mariadb-server", "mariadb-client"],
                    ["mariadbd", "mariadb-install-db"])

    def _write_config(self) -> str:
        cnf = self.dir / "my.cnf"
        binlog = SOURCE_BINLOG if self.binlog else f"server-id = {self.server_id}\n"
        cnf.write_text(textwrap.dedent(f"""\
            [mariadbd]
            user = root
            datadir = {self.dir / 'data'}
            port = {self.port}
            bind-address = {HOST}
            socket = {self.socket}
            pid-file = {self.dir / 'mariadbd.pidfile'}
            log-error = {self.log}
            skip-name-resolve
            character-set-server = utf8mb4
            collation-server = utf8mb4_general_ci
            max-allowed-packet = 256M
            innodb-buffer-pool-size = 256M
            innodb-log-file-size = 256M
            innodb-flush-log-at-trx-commit = 2
            sync-binlog = 0
            performance-schema = OFF
            """) + binlog)
        return str(cnf)

    def launch(self) -> None:
        cnf = self._write_config()
        data = self.dir / "data"
        if not (data / "mysql").exists():
            shutil.rmtree(data, ignore_errors=True)
            process.run(self.name, ["mariadb-install-db", f"--defaults-file={cnf}",
                                    "--auth-root-authentication-method=normal",
                                    "--skip-test-db"], log=self.log)
        # --defaults-file must be the first option or mariadbd ignores it.
        process.spawn(self.name, ["mariadbd", f"--defaults-file={cnf}"],
                      log=self.dir / "stdout.log", pid_file=self.pid_file)

    def connect(self, database: str | None = None) -> pymysql.connections.Connection[Any]:
        """A root connection over TCP, utf8mb4 throughout."""
        return pymysql.connect(host=HOST, port=self.port, user="root", password="",
                               database=database, charset="utf8mb4", autocommit=True,
                               connect_timeout=2)

    def ready(self) -> bool:
        try:
            with self.connect() as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
                return bool(cur.fetchone() == (1,))
        except pymysql.MySQLError:
            return False

    def version(self) -> str:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
            return str(row[0]) if row else "?"


def source() -> MariaDB:
    """The replication source: binlog ROW, row image FULL, row metadata FULL, server-id 1."""
    return MariaDB("mariadb-source", server_id=1, binlog=True)


def bench_source() -> MariaDB:
    """``make bench-compare``'s own source, configured as ``source()`` (never used by tests):
    the benchmark resets its binlog."""
    return MariaDB("mariadb-bench-source", server_id=4, binlog=True)


def scratch() -> MariaDB:
    """A source configured as ``source()`` for the tests that stop it or purge its binlog."""
    return MariaDB("mariadb-scratch", server_id=5, binlog=True)


def target() -> MariaDB:
    """The MariaDB target of the SQL applier."""
    return MariaDB("mariadb-target", server_id=2, binlog=False)
