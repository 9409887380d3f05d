"""Processes that integration tests start: ``trep`` commands, and what kill tests need."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from stack.process import alive
from stack.settings import REPO_ROOT

#: Set in every test process's environment to its own pid (``own_spawned``), so every
#: process a test spawns carries the pid of the pytest process it belongs to.
OWNER = "TREP_TEST_OWNER"


def own_spawned() -> None:
    """Mark what this pytest process spawns from now on as its own (``kill_orphans``)."""
    os.environ[OWNER] = str(os.getpid())


def kill_orphans() -> list[int]:
    """SIGKILL the ``trep`` processes that tests of a pytest process now gone left behind.

    A test's ``kill_leftovers`` runs in its teardown, which a killed pytest never reaches:
    its extractors and consumer groups went on replicating, against the same fixed ports,
    through the next run (two did during a CI run, 2026-12-01). Only ``python -m trep.*``
    processes are taken, never a server: a dead run's servers are reused by the next.
    """
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to read
        if not any(arg.startswith(b"trep.") for arg in cmdline):
            continue
        owner = next((v[len(OWNER) + 1:] for v in environ
                      if v.startswith(OWNER.encode() + b"=")), None)
        if owner is None or not owner.isdigit() or alive(int(owner)):
            continue
        try:
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
        except ProcessLookupError:
            pass
    return killed


def bare_env() -> dict[str, str]:
    """An environment with nothing of the test's but the repository on the path (what an
    operator's shell would give a command), coverage's variables, so that ``make
    coverage`` measures these processes too, and the test's owner mark (``OWNER``)."""
    env = {"PYTHONPATH": str(REPO_ROOT)}
    if OWNER in os.environ:
        env[OWNER] = os.environ[OWNER]
    env.update({k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")})
    return env


def spawn_trep(module: str, config: Path, log_path: Path, *args: str,
               crash: str | None = None, inherit_crash: bool = False
               ) -> subprocess.Popen[bytes]:
    """``python -m <module> -c <config> <args>`` in its own process, logging to ``log_path``.

    ``crash`` arms a crash point (``replicator.crashpoints``); one armed in the test's own
    environment is dropped, unless ``inherit_crash``.
    """
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    if not inherit_crash:
        env.pop("TREP_CRASH_AT", None)
    if crash is not None:
        env["TREP_CRASH_AT"] = crash
    with log_path.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", module, "-c", str(config), *args],
                                stdout=log, stderr=log, env=env, cwd=REPO_ROOT)


def run_trep(module: str, config: Path, *args: str, input: str | None = None,
             timeout: float = 120, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``python -m <module> -c <config> <args>`` run to its end, its output captured (the
    environment: the test's own with the repository importable, unless ``env``)."""
    return subprocess.run([sys.executable, "-m", module, "-c", str(config), *args],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)) if env is None else env,
                          cwd=REPO_ROOT, input=input, timeout=timeout, check=False)


def kill_leftovers(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL the processes of a test that are still running (a test that failed half-way)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def spawn_until_logged(spawn: Callable[[], subprocess.Popen[bytes]], read_log: Callable[[], str],
                       texts: Sequence[str], timeout: float = 120.0) -> subprocess.Popen[bytes]:
    """A process from ``spawn``, once the log it shares with its predecessors shows each of
    ``texts`` once more than before it started (so the new process got there). Fails if it
    exits first or takes longer than ``timeout``."""
    before = read_log()
    counts = {text: before.count(text) for text in texts}
    proc = spawn()
    deadline = time.monotonic() + timeout
    while True:
        log = read_log()
        if all(log.count(text) > n for text, n in counts.items()):
            return proc
        assert proc.poll() is None, log[-3000:]
        assert time.monotonic() < deadline, f"never logged {list(texts)}:\n{log[-3000:]}"
        time.sleep(0.1)


def stacks(pid: int) -> str:
    """Every thread's Python stack of a live process (py-spy dump), for the report of a
    test that found it stuck: where it waits is the first thing to know."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no stacks of pid {pid}: {exc})"
    return done.stdout + done.stderr


def thread_stacks() -> str:
    """Every thread's Python stack of this process (a service a test runs in-process)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
                     for ident, frame in sys._current_frames().items())


def peak_rss(pid: int) -> int:
    """Peak resident memory of a live process so far, bytes (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")
