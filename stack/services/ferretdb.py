"""A MongoDB-wire server: FerretDB 1.24 on SQLite, built from the Go module proxy.

No mongod can be had on these machines; FerretDB speaks the same wire protocol (no
transactions, no change streams). The binary is built once from ``stack/ferretdb`` and kept
in the cache under a hash of its sources, so a second install builds nothing.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from stack import process
from stack.errors import StackError
from stack.service import TcpService
from stack.settings import HOST, REPO_ROOT, cache_dir

SOURCE_DIR = REPO_ROOT / "stack" / "ferretdb"
FERRETDB_VERSION = "1.24.0"


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go"
                                if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise StackError("ferretdb", "the Go toolchain is needed to build FerretDB "
                                     "(install Go 1.22+ and put it on PATH)")
    return go


class FerretDB(TcpService):
    """FerretDB listening on 127.0.0.1 with its SQLite files under the run directory."""

    name = "ferretdb"
    start_timeout = 60.0


    @property
    def binary(self) -> Path:
        digest = hashlib.sha256()
        for name in ("main.go", "go.mod", "go.sum"):
            digest.update((SOURCE_DIR / name).read_bytes())
        return cache_dir("ferretdb") / f"ferretdb-{digest.hexdigest()[:16]}"

    def install(self) -> None:
        binary = self.binary
        if binary.exists():
            return
        go_env = {"GOMODCACHE": str(cache_dir("go", "mod")),
                  "GOCACHE": str(cache_dir("go", "build")),
                  "GOFLAGS": "-buildvcs=false -mod=readonly", "CGO_ENABLED": "0"}
        tmp = binary.with_name(binary.name + ".tmp")
        process.run(self.name, [_go(), "build", "-trimpath", "-o", str(tmp), "."],
                    log=self.log, env=go_env, cwd=SOURCE_DIR, timeout=1800)
        tmp.rename(binary)

    def launch(self) -> None:
        process.spawn(self.name, [str(self.binary), "-listen", f"{HOST}:{self.port}",
                                  "-data", str(self.dir / "data")],
                      log=self.log, pid_file=self.pid_file)

    def client(self) -> MongoClient[dict[str, object]]:
        """A pymongo client of this server."""
        return MongoClient(f"mongodb://{HOST}:{self.port}/", directConnection=True,
                           serverSelectionTimeoutMS=2000)

    def ready(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.admin.command("ping").get("ok"))
        except PyMongoError:
            return False

    def version(self) -> str:
        with self.client() as client:
            wire = client.admin.command("buildInfo").get("version", "?")
        return f"FerretDB {FERRETDB_VERSION} (MongoDB {wire} wire)"


def service() -> FerretDB:
    """The local MongoDB-wire server."""
    return FerretDB()
