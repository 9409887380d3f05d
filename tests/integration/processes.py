"""Processes that integration tests start."""

from __future__ import annotations

import subprocess


def kill_leftovers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL the processes of a test that are still running (a test that failed half-way)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
