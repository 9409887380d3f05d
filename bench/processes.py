"""The processes a benchmark starts and measures: ``trep-run`` and friends, their CPU and
memory from ``/proc``.

Every benchmark times a child process from its start (imports, ZooKeeper, Kafka and the
epoch handshake included) and stops it as an operator would, so they all start and stop
them here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

#: The repository: benchmarks run its code, whatever is installed.
ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def spawn(args: list[str], log: Path, env: Mapping[str, str] | None = None
          ) -> subprocess.Popen[bytes]:
    """``args`` run from the repository (its packages first), output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=out,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def start_runner(config: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A ``trep-run`` process for the service of ``config``, its output in ``log``."""
    return spawn([sys.executable, "-m", "trep.runner", "-c", str(config), *args], log)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as an operator would; SIGKILL only if it does not stop within a minute."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a running process (with ``children``: also those of
    its children it has reaped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15 if children else 13]) / CLK_TCK


def peak_rss_kib(pid: int) -> int:
    """Peak resident memory (VmHWM) of a running process, KiB (0: not reported)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
