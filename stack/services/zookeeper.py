"""ZooKeeper 3.9 standalone, from Maven Central jars (the replicator's positions and locks)."""

from __future__ import annotations

import socket
import textwrap

from stack import process
from stack.fetch import maven_runtime_jars
from stack.service import TcpService
from stack.settings import C1_ONLY, HOST, JAVA_HOME, cache_dir

ZOOKEEPER_VERSION = "3.9.4"

#: Without a configuration logback logs at DEBUG; INFO is plenty.
LOGBACK = """\
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %-5level [%thread] %logger{36} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""


class ZooKeeper(TcpService):
    """``ZooKeeperServerMain`` with the admin server off (it would take port 8080)."""

    start_timeout = 60.0

    def __init__(self, name: str = "zookeeper") -> None:
        self.name = name

    def _classpath(self) -> str:
        jars = maven_runtime_jars(
            self.name, [
                f"org.apache.zookeeper:zookeeper:{ZOOKEEPER_VERSION}",
                # Optional or "provided" in ZooKeeper's pom, needed by the standalone server.
                "ch.qos.logback:logback-classic:1.3.15",
                "io.dropwizard.metrics:metrics-core:4.1.12.1",
                "org.xerial.snappy:snappy-java:1.1.10.5",
            ],
            cache_dir(f"zookeeper-{ZOOKEEPER_VERSION}-libs"), log=self.log)
        return ":".join(str(j) for j in jars)

    def install(self) -> None:
        self._classpath()

    def launch(self) -> None:
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(textwrap.dedent(f"""\
            tickTime=1000
            minSessionTimeout=2000
            maxSessionTimeout=60000
            initLimit=10
            syncLimit=5
            dataDir={self.dir / 'data'}
            clientPort={self.port}
            clientPortAddress={HOST}
            maxClientCnxns=200
            admin.enableServer=false
            4lw.commands.whitelist=ruok,srvr,stat
            """))
        (self.dir / "logback.xml").write_text(LOGBACK)
        process.spawn(self.name, [
            str(JAVA_HOME / "bin" / "java"), "-Xms64m", "-Xmx256m", C1_ONLY,
            f"-Dlogback.configurationFile={self.dir / 'logback.xml'}",
            "-cp", self._classpath(), "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(cfg)], log=self.log, pid_file=self.pid_file)

    def four_letter(self, word: str) -> str:
        """Answer of a four-letter command (``ruok``, ``srvr``, ``stat``)."""
        with socket.create_connection((HOST, self.port), timeout=2) as sock:
            sock.sendall(word.encode())
            chunks = []
            while data := sock.recv(4096):
                chunks.append(data)
        return b"".join(chunks).decode()

    def ready(self) -> bool:
        try:
            return self.four_letter("ruok") == "imok"
        except OSError:
            return False

    def version(self) -> str:
        lines = self.four_letter("srvr").splitlines()
        if not lines or ":" not in lines[0]:
            return ZOOKEEPER_VERSION  # the server answers srvr only once fully up
        # "Zookeeper version: 3.9.4-<hash>, built on ..."
        return lines[0].split(":", 1)[1].split(",")[0].split("-")[0].strip()


def service() -> ZooKeeper:
    """The local ZooKeeper server."""
    return ZooKeeper()


def scratch() -> ZooKeeper:
    """A second server, for the test that stops ZooKeeper under a running service."""
    return ZooKeeper("zookeeper-scratch")
