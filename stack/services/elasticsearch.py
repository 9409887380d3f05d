"""Elasticsearch 8.19 from Maven Central's integ-test zip, security off, as a non-root user.

The integ-test distribution is the minimal one (no bundled JDK, no painless, no reindex), which
is all the Elasticsearch applier needs: index/delete by id with external versions, bulk,
search. It has no ``GET /`` handler either (405), so ``version()`` asks the nodes API.

For the replicator: ``index.gc_deletes`` defaults to ``60s`` (read from
``GET <index>/_settings?include_defaults=true`` on 8.19.21). A deleted document's external
version is remembered only that long; after it, an index request carrying an older external
version is accepted again, so a replay that reaches a delete more than 60 s later can
resurrect the document unless the index sets a longer ``gc_deletes``.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from stack import process
from stack.fetch import maven_file
from stack.service import TcpService
from stack.settings import C1_ONLY, HOST, JAVA_HOME, cache_dir, port
from stack.users import hand_over, service_user

ES_VERSION = "8.19.21"


class Elasticsearch(TcpService):
    """A single-node cluster on 127.0.0.1 with a 512 MiB heap."""

    name = "elasticsearch"
    start_timeout = 180.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def home(self) -> Path:
        return cache_dir("elasticsearch") / f"elasticsearch-{ES_VERSION}"

    def install(self) -> None:
        marker = self.home / ".installed"
        if marker.exists():
            return
        archive = maven_file(self.name, "org.elasticsearch.distribution.integ-test-zip",
                             "elasticsearch", ES_VERSION, ext="zip")
        shutil.rmtree(self.home, ignore_errors=True)
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                path = Path(zf.extract(info, self.home.parent))
                mode = info.external_attr >> 16
                if mode:  # zipfile drops the permission bits; bin/ scripts need theirs
                    path.chmod(mode & 0o777)
        # The service user must reach the distribution (the cache may sit under /root, mode
        # 0700): traversal (o+x) is enough on the folders above it, nothing becomes listable.
        for parent in self.home.parents:
            if parent == Path("/"):
                break
            parent.chmod(parent.stat().st_mode | 0o001)
        marker.touch()

    def _write_config(self) -> Path:
        conf = self.dir / "config"
        if conf.exists():
            shutil.rmtree(conf)
        shutil.copytree(self.home / "config", conf)
        (conf / "elasticsearch.yml").write_text(textwrap.dedent(f"""\
            cluster.name: tungsten-kafka-stack
            node.name: node-1
            path.data: {self.dir / 'data'}
            path.logs: {self.dir / 'logs'}
            network.host: {HOST}
            http.port: {self.port}
            transport.port: {port('elasticsearch-transport')}
            discovery.type: single-node
            xpack.security.enabled: false
            xpack.ml.enabled: false
            cluster.routing.allocation.disk.threshold_enabled: false
            action.destructive_requires_name: false
            """))
        (conf / "jvm.options.d").mkdir(exist_ok=True)
        (conf / "jvm.options.d" / "heap.options").write_text(f"-Xms512m\n-Xmx512m\n{C1_ONLY}\n")
        for sub in ("data", "logs", "tmp"):
            (self.dir / sub).mkdir(exist_ok=True)
        for left in (self.dir / "tmp").glob("final-flags*"):  # see launch()
            shutil.rmtree(left, ignore_errors=True)
        return conf

    def launch(self) -> None:
        conf = self._write_config()
        hand_over(self.dir)
        # The launcher's own JVM probes the server's final flags in a temporary folder it
        # cannot delete (the probe writes gc.log into it): in /tmp, one more per start.
        env = {"ES_JAVA_HOME": str(JAVA_HOME), "ES_PATH_CONF": str(conf),
               "ES_TMPDIR": str(self.dir / "tmp"), "JAVA_HOME": str(JAVA_HOME),
               "CLI_JAVA_OPTS": f"-Djava.io.tmpdir={self.dir / 'tmp'}"}
        # Elasticsearch refuses to run as root; HOME must be writable by the user it runs as.
        if service_user() is not None:
            env["HOME"] = str(self.dir)
        process.spawn(self.name, [str(self.home / "bin" / "elasticsearch")], log=self.log,
                      pid_file=self.pid_file, env=env, user=service_user(), cwd=self.dir)

    def request(self, path: str) -> Any:
        """GET ``path`` and decode the JSON answer."""
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:  # noqa: S310
            return json.loads(resp.read())

    def ready(self) -> bool:
        try:
            health = self.request("/_cluster/health")
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return health.get("status") in ("yellow", "green")

    def version(self) -> str:
        # The minimal distribution has no "GET /" handler; the nodes API has the version.
        nodes = self.request("/_nodes/_local?filter_path=nodes.*.version")["nodes"]
        return str(next(iter(nodes.values()))["version"])


def service() -> Elasticsearch:
    """The local Elasticsearch node."""
    return Elasticsearch()
