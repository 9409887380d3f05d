"""The console's browser tests: a replication service of the consumer tests, the console as
its own process, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from console.auth import hash_password
from stack.fetch import apt_install

from ..consumers.conftest import (  # noqa: F401 - the fixtures, for this directory too
    Replication,
    make_replication,
    replication,
)

USER, PASSWORD = "ops", "a console pass phrase"


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Debian's chromium (installed by the project's stack scripts if missing), headless."""
    apt_install("chromium", ["chromium"], ["chromium"])
    executable = shutil.which("chromium")
    assert executable is not None
    with sync_playwright() as p:
        found = p.chromium.launch(executable_path=executable, headless=True,
                                  args=["--no-sandbox", "--disable-gpu"])
        yield found
        found.close()


class Console:
    """``trep-console serve`` for one service, on a port of its own."""

    def __init__(self, rep: Replication, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "TREP_CONSOLE_USERS": f"{USER}:{hash_password(PASSWORD)}"}
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trep.console", "serve", "-c", str(rep.config_path),
             "--port", str(port)], stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health",  # noqa: S310 - http only
                                            timeout=2):
                    return
            except OSError:
                assert self.proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def console(replication: Replication, unused_port: int, tmp_path: Path  # noqa: F811
            ) -> Iterator[Console]:
    running = Console(replication, unused_port, tmp_path / "console.log")
    yield running
    running.stop()
