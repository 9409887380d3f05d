"""Starting, watching and stopping server processes without a service manager."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stack.errors import StackError
from stack.settings import HOST


def port_open(port: int, host: str = HOST) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def read_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is still alive, else None."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` is alive (a zombie is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this very process still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    # A zombie child of another process (a server one test worker started and another
    # stopped) is dead too, though only its parent can reap it.
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] == "Z"


def spawn(
    service: str,
    argv: Sequence[str],
    *,
    log: Path,
    pid_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
) -> int:
    """Start a server in its own session (it outlives the caller) and record its pid.

    Output goes to ``log`` so a server that dies at start-up can be diagnosed.
    """
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
                **_identity(user),
            )
        except OSError as exc:
            raise StackError(service, f"cannot run {argv[0]}: {exc}", log) from exc
    pid_file.write_text(str(proc.pid))
    return proc.pid


def _identity(user: str | None) -> dict[str, Any]:
    """Popen arguments to run as ``user`` with its own groups, not root's.

    ``user=`` alone keeps gid 0, and group bits then deny what "other" bits would allow.
    """
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def wait_until(
    service: str,
    ready: Callable[[], bool],
    *,
    timeout: float,
    log: Path,
    pid_file: Path | None = None,
    interval: float = 0.5,
) -> None:
    """Poll ``ready`` until it is true; fail early if the server process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if pid_file is not None and read_pid(pid_file) is None:
            raise StackError(service, "the server process exited during start-up", log)
        time.sleep(interval)
    raise StackError(service, f"not ready after {timeout:.0f} s", log)


def stop_pid(pid_file: Path, timeout: float = 30.0,
             first: signal.Signals = signal.SIGTERM) -> None:
    """Stop the process group in ``pid_file``: ``first`` (SIGTERM), then SIGKILL after
    ``timeout``."""
    pid = read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return
    _signal_group(pid, first)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and read_pid(pid_file) is not None:
        time.sleep(0.2)
    if read_pid(pid_file) is not None:
        _signal_group(pid, signal.SIGKILL)
        while read_pid(pid_file) is not None:
            time.sleep(0.1)
    pid_file.unlink(missing_ok=True)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)


def run(service: str, argv: Sequence[str], *, log: Path | None = None,
        env: Mapping[str, str] | None = None, cwd: Path | None = None,
        user: str | None = None, timeout: float = 1800) -> str:
    """Run a set-up command to completion; its output is returned, or appended to ``log``."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, env=full_env, cwd=cwd,
            timeout=timeout, check=False, **_identity(user),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(service, f"{argv[0]} failed: {exc}", log) from exc
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
        # The first line that says ERROR names the cause (Maven prints it first, then help).
        errors = [ln for ln in lines if "ERROR" in ln or "error" in ln]
        reason = (errors or lines or ["no output"])[0][:300]
        raise StackError(service, f"{' '.join(argv[:2])} exited {done.returncode}: {reason}", log)
    return str(done.stdout)
