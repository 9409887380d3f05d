"""The shape every local server fills: install, start, readiness, stop, status."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from stack import process, settings
from stack.errors import StackError
from stack.settings import service_dir


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``make stack-status``."""

    name: str
    port: int | None
    up: bool
    version: str
    log: Path


class Service(abc.ABC):
    """A server of the local stack, run as a plain process under ``.run/<name>``.

    Subclasses say how to install, launch and probe the server; this class owns the common
    order of things: refuse a port someone else holds, spawn, wait for readiness, stop.
    """

    #: Service name used in the run directory, the status table and error messages.
    name: str
    #: Seconds allowed between launch and readiness.
    start_timeout: float = 120.0

    @property
    def dir(self) -> Path:
        return service_dir(self.name)

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / f"{self.name}.pid"

    @property
    @abc.abstractmethod
    def port(self) -> int | None:
        """The client port, or None for an in-process service (Spark local)."""

    @abc.abstractmethod
    def install(self) -> None:
        """Fetch and prepare binaries; idempotent, and downloads go to the cache."""

    @abc.abstractmethod
    def launch(self) -> None:
        """Write configuration, initialise data if new, and spawn the server."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """True when the server answers real requests (not just an open port)."""

    @abc.abstractmethod
    def version(self) -> str:
        """The version the running server reports (or the installed one)."""

    def running(self) -> bool:
        """True if the process this stack started is alive."""
        return process.read_pid(self.pid_file) is not None

    def start(self) -> None:
        """Install if needed, start if not running, and wait until ready."""
        self.install()
        if self.running():
            process.wait_until(self.name, self.ready, timeout=self.start_timeout,
                               log=self.log, pid_file=self.pid_file)
            return
        if self.port is not None and process.port_open(self.port):
            raise StackError(
                self.name,
                f"port {self.port} is already taken by another process; stop it or set "
                f"TREP_{self.name.upper().replace('-', '_')}_PORT",
                self.log,
            )
        self.launch()
        process.wait_until(self.name, self.ready, timeout=self.start_timeout,
                           log=self.log, pid_file=self.pid_file)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); a stopped server is left alone."""
        process.stop_pid(self.pid_file)

    def status(self) -> ServiceStatus:
        up = self.running() and self.ready()
        try:
            version = self.version() if up else "-"
        except Exception as exc:  # a status table must never crash on one bad probe
            version = f"? ({type(exc).__name__})"
        return ServiceStatus(self.name, self.port, up, version, self.log)


class TcpService(Service):
    """A server listening on 127.0.0.1 at ``TREP_<NAME>_PORT`` (or its default port)."""

    @property
    def port(self) -> int:
        return settings.port(self.name)
