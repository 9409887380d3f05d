"""Apicurio Registry 3.0.9 (Maven Central zip): the schema registry of the change topics.

Its Confluent-compatible API is at ``/apis/ccompat/v7``: what confluent-kafka's
``SchemaRegistryClient`` and every Confluent deserializer talk to. Schema ids there are
Apicurio content ids, the 4-byte ids of the Confluent wire format.

Storage: H2 in a file under the run directory (``apicurio.datasource.url``), not the default
in-memory database. A registry that forgets its schemas on a restart would hand out the same
ids again for other schemas, and every record already in a topic would then decode with the
wrong schema; with the file, a restart keeps every id.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from stack import process
from stack.fetch import maven_file
from stack.service import TcpService
from stack.settings import C1_ONLY, HOST, JAVA_HOME, cache_dir

APICURIO_VERSION = "3.0.9"
#: Path of the Confluent-compatible API.
CCOMPAT = "/apis/ccompat/v7"


class Apicurio(TcpService):
    """One registry process on 127.0.0.1 with a small heap and an H2 file database."""

    name = "apicurio"
    start_timeout = 120.0

    @property
    def url(self) -> str:
        """Base URL of the registry."""
        return f"http://{HOST}:{self.port}"

    @property
    def ccompat_url(self) -> str:
        """The Confluent-compatible API: the ``schema_registry.url`` of a change group."""
        return self.url + CCOMPAT

    @property
    def home(self) -> Path:
        return cache_dir("apicurio") / f"apicurio-registry-{APICURIO_VERSION}"

    @property
    def runner(self) -> Path:
        return self.home / f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"

    def install(self) -> None:
        marker = self.home / ".installed"
        if marker.exists():
            return
        archive = maven_file(self.name, "io.apicurio", "apicurio-registry-app",
                             APICURIO_VERSION, ext="zip", classifier="all")
        shutil.rmtree(self.home, ignore_errors=True)
        part = self.home.with_name(self.home.name + ".part")
        shutil.rmtree(part, ignore_errors=True)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(part)
        part.rename(self.home)
        marker.touch()

    def launch(self) -> None:
        data = self.dir / "data"
        data.mkdir(exist_ok=True)
        process.spawn(self.name, [
            str(JAVA_HOME / "bin" / "java"), "-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", C1_ONLY,
            f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={self.port}",
            f"-Dapicurio.datasource.url=jdbc:h2:file:{data / 'registry'}",
            # The default pool keeps 20 connections open; an embedded H2 needs a few.
            "-Dapicurio.datasource.jdbc.initial-size=2",
            "-Dapicurio.datasource.jdbc.min-size=2",
            "-Dapicurio.datasource.jdbc.max-size=10",
            "-jar", str(self.runner)], log=self.log, pid_file=self.pid_file,
            env={"JAVA_HOME": str(JAVA_HOME)}, cwd=self.dir)

    def request(self, path: str, method: str = "GET", body: Any = None) -> Any:
        """One JSON request to the registry; its decoded answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,  # noqa: S310
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
            text = resp.read()
        return json.loads(text) if text else None

    def ready(self) -> bool:
        try:
            return isinstance(self.request(CCOMPAT + "/subjects"), list)
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def version(self) -> str:
        return str(self.request("/apis/registry/v3/system/info")["version"])


def service() -> Apicurio:
    """The local schema registry."""
    return Apicurio()
