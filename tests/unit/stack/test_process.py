"""Process control of the stack: start-up failures name the service and its log."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stack import process
from stack.errors import StackError


def test_dead_server_fails_readiness_with_its_log(tmp_path: Path) -> None:
    log, pid = tmp_path / "x.log", tmp_path / "x.pid"
    process.spawn("demo", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"],
                  log=log, pid_file=pid)
    with pytest.raises(StackError) as err:
        process.wait_until("demo", lambda: False, timeout=20, log=log, pid_file=pid)
    assert str(err.value) == f"demo: the server process exited during start-up (see {log})"
    assert "boom" in log.read_text()


def test_readiness_timeout_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "y.log"
    with pytest.raises(StackError, match=r"^demo: not ready after 1 s \(see .*y\.log\)$"):
        process.wait_until("demo", lambda: False, timeout=1, log=log, interval=0.1)


def test_stop_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "z.pid"
    process.spawn("demo", ["sh", "-c", "sleep 300 & sleep 300"], log=tmp_path / "z.log",
                  pid_file=pid_file)
    assert process.read_pid(pid_file) is not None
    process.stop_pid(pid_file, timeout=5)
    assert process.read_pid(pid_file) is None
    assert not pid_file.exists()


def test_port_open_sees_a_listener() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert process.port_open(srv.getsockname()[1])


def test_failed_command_reports_exit_code_and_last_line(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"^demo: sh -c exited 2: bad thing"):
        process.run("demo", ["sh", "-c", "echo bad thing >&2; exit 2"], log=tmp_path / "l")


def test_a_zombie_of_another_parent_is_not_running(tmp_path: Path) -> None:
    # A server one test worker started and another stopped stays a zombie until its
    # parent reaps it: it is dead, and stop() must not wait for it forever.
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import os, subprocess, sys, time\n"
         "child = subprocess.Popen(['true'])\n"
         "print(child.pid, flush=True)\n"
         "time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        pid_file = tmp_path / "server.pid"
        pid_file.write_text(str(pid))
        deadline = time.monotonic() + 10
        while process.read_pid(pid_file) is not None:
            assert time.monotonic() < deadline, "a zombie counted as running"
            time.sleep(0.05)
        assert Path(f"/proc/{pid}").exists()  # still there, unreaped: a zombie
        process.stop_pid(pid_file, timeout=1)
        assert not pid_file.exists()
    finally:
        parent.kill()
        parent.wait()
