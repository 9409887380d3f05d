"""Ending a killed predecessor's ZooKeeper session at once, instead of after its timeout.

A process killed with SIGKILL (or by the OOM killer, or a power cut of its container)
leaves its ZooKeeper session behind: its group locks and ephemeral nodes stay until the
session times out, so the process restarted in its place waits that long as standby. On
the same host we can do better. Each process that takes locks claims a *slot*: a small
local file it keeps ``flock``-ed while it lives, holding its session's id and password.
The kernel releases the flock when the process dies, however it dies, so a slot that can be
locked belongs to nobody alive. Its next owner re-attaches to the session the file names
and closes it: ZooKeeper drops that session's locks and ephemeral nodes right away.

Nothing is guessed: only a dead process's own file (same host, same ZooKeeper hosts, root,
service and role) leads to ending a session, and a session that expired meanwhile is simply
not there any more. ``session_dir`` must be a local directory (flock over a network file
system is not to be trusted).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from replicator.config import ZooKeeperConfig

log = logging.getLogger(__name__)

#: Slots per (service, role) on one host: standbys of one service on one host take the next
#: free one.
_SLOTS = 64


def default_session_dir() -> Path:
    """Where slots live unless ``zookeeper.session_dir`` says otherwise (per user)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "tungsten-kafka"
    return Path(tempfile.gettempdir()) / f"tungsten-kafka-{os.getuid()}"


class SessionSlot:
    """One claimed slot: locked for this process's life, naming its current session."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def claim(cls, directory: Path, hosts: str, root: str, service: str, role: str
              ) -> SessionSlot | None:
        """The first free slot of (hosts, root, service, role), locked; None if none is
        free or the directory cannot be used (then restarts wait out session timeouts)."""
        ident = hashlib.sha256(f"{hosts}\0{root}\0{service}".encode()).hexdigest()[:16]
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            for n in range(_SLOTS):
                path = directory / f"{service[:40]}-{ident}-{role}-{n}.zk"
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return cls(path, fd)
        except OSError as exc:
            log.warning("ZooKeeper session slots in %s: %s; a restart after a crash will "
                        "wait for the old session to time out", directory, exc)
            return None
        log.warning("all %d ZooKeeper session slots of %s/%s are in use", _SLOTS, service, role)
        return None

    def predecessor(self) -> tuple[int, bytes] | None:
        """The session the slot's last owner recorded (it is dead: the slot was free)."""
        try:
            text = os.pread(self._fd, 4096, 0).decode()
            if not text.strip():
                return None
            data = json.loads(text)
            return int(data["session_id"]), bytes.fromhex(data["password"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.debug("%s: unreadable (%s); ignored", self.path, exc)
            return None

    def end_predecessor(self, hosts: str, timeout: float) -> bool:
        """Close the dead predecessor's session if ZooKeeper still has it; True if it did."""
        found = self.predecessor()
        if found is None:
            return False
        client = KazooClient(hosts=hosts, timeout=timeout, client_id=found)
        ended = False
        try:
            client.start(timeout=timeout)
            # Re-attached: the same id. An expired session gets a new one instead.
            ended = client.client_id is not None and client.client_id[0] == found[0]
        except (KazooException, KazooTimeoutError) as exc:
            # ZooKeeper away: the session times out by itself, as without a slot.
            log.info("could not end ZooKeeper session 0x%x of a process that died on this "
                     "host: %s", found[0], exc)
            return False
        finally:
            with contextlib.suppress(KazooException, KazooTimeoutError):
                client.stop()
            client.close()
        self.record(None)
        if ended:
            log.info("ended ZooKeeper session 0x%x of a process that died on this host "
                     "(slot %s): its locks are free now", found[0], self.path.name)
        return ended

    def record(self, client_id: tuple[int, bytes] | None) -> None:
        """Write the session this process now has (None: none)."""
        text = "" if client_id is None else json.dumps(
            {"session_id": client_id[0], "password": client_id[1].hex(), "pid": os.getpid()})
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text.encode(), 0)
        except OSError as exc:
            log.warning("%s: %s", self.path, exc)

    def follow(self, client: KazooClient) -> None:
        """Keep the slot naming ``client``'s session, across new sessions after expiry."""
        def changed(state: str) -> None:
            if state == KazooState.CONNECTED and client.client_id is not None:
                self.record(client.client_id)

        if client.connected and client.client_id is not None:
            self.record(client.client_id)
        client.add_listener(changed)

    def release(self) -> None:
        """A clean stop: the session is closed by its owner, nothing to end later."""
        self.record(None)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def claim_slot(zk: ZooKeeperConfig, service: str, role: str) -> SessionSlot | None:
    """Claim this process's slot for ``role`` and end the session a dead predecessor left
    in it (see the module's docstring); None when slots cannot be used here."""
    directory = Path(zk.session_dir) if zk.session_dir else default_session_dir()
    slot = SessionSlot.claim(directory, zk.hosts, zk.root, service, role)
    if slot is not None:
        slot.end_predecessor(zk.hosts, zk.timeout_s)
    return slot
