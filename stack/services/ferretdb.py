"""A MongoDB-wire server: FerretDB 1.24 on SQLite, built from the Go module proxy.

No mongod can be had on these machines, so this stands in for MongoDB in tests; production
targets real MongoDB. FerretDB speaks the same wire protocol but has no transactions and no
change streams. The binary is built once from ``stack/ferretdb`` (see main.go for why it is
not ``go install``) and kept in the cache under a hash of its sources: a second install
builds nothing, and editing main.go, go.mod or go.sum builds a new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from stack import process
from stack.errors import StackError
from stack.service import TcpService
from stack.settings import HOST, REPO_ROOT, cache_dir

SOURCE_DIR = REPO_ROOT / "stack" / "ferretdb"
SOURCES = ("main.go", "go.mod", "go.sum")
GO_TARBALL = Path("/usr/local/go/bin/go")


def _go() -> str:
    # /usr/local/go is where the official tarball goes; it is often not on a service's PATH.
    go = shutil.which("go") or (str(GO_TARBALL) if GO_TARBALL.exists() else None)
    if go is None:
        raise StackError("ferretdb", "the Go toolchain (1.22+) is needed to build FerretDB; "
                                     "install it and put it on PATH")
    return go


class FerretDB(TcpService):
    """FerretDB listening on 127.0.0.1 with its SQLite files under the run directory."""

    name = "ferretdb"
    start_timeout = 60.0

    @property
    def binary(self) -> Path:
        """The cached binary built from the current sources."""
        digest = hashlib.sha256()
        for name in SOURCES:
            digest.update((SOURCE_DIR / name).read_bytes())
        return cache_dir("ferretdb") / f"ferretdb-{digest.hexdigest()[:16]}"

    def install(self) -> None:
        binary = self.binary
        if binary.exists():
            return
        go_env = {
            # Modules and compiled packages stay in the stack's cache, not in ~/go.
            "GOMODCACHE": str(cache_dir("go", "mod")),
            "GOCACHE": str(cache_dir("go", "build")),
            # go.sum is committed: refuse to resolve anything it does not pin, and never
            # fetch another toolchain behind the caller's back.
            "GOFLAGS": "-mod=readonly -buildvcs=false",
            "GOTOOLCHAIN": "local",
            # Pure Go SQLite (modernc): no C compiler needed.
            "CGO_ENABLED": "0",
        }
        tmp = binary.with_name(f"{binary.name}.{os.getpid()}.tmp")
        log = self.dir / "build.log"
        try:
            process.run(self.name, [_go(), "build", "-trimpath", "-o", str(tmp), "."],
                        log=log, env=go_env, cwd=SOURCE_DIR, timeout=1800)
        except StackError as exc:
            # Go prints progress ("go: downloading ...") first and the cause last.
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            raise StackError(self.name, f"go build failed: {lines[-1][:300] if lines else exc}",
                             log) from exc
        tmp.rename(binary)

    def launch(self) -> None:
        process.spawn(self.name, [str(self.binary), "-listen", f"{HOST}:{self.port}",
                                  "-data", str(self.dir / "data")],
                      log=self.log, pid_file=self.pid_file)

    def client(self, **options: Any) -> MongoClient[dict[str, Any]]:
        """A pymongo client of this server; ``options`` go to ``MongoClient``."""
        options.setdefault("serverSelectionTimeoutMS", 2000)
        return MongoClient(f"mongodb://{HOST}:{self.port}/", directConnection=True, **options)

    def ready(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.admin.command("ping").get("ok"))
        except PyMongoError:
            return False

    def version(self) -> str:
        """FerretDB's own version and the MongoDB version it claims, both from ``buildInfo``."""
        with self.client() as client:
            info = client.admin.command("buildInfo")
        return f"FerretDB {info.get('ferretdbVersion', '?')} (MongoDB {info.get('version', '?')})"


def service() -> FerretDB:
    """The local MongoDB-wire server."""
    return FerretDB()
