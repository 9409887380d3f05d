"""The life of a component (the extractor, every consumer group): standby until it holds its
ZooKeeper lock, lead until stopped or until the lock is gone, and through transient failures
start again with backoff.

What differs between components stays with them and comes in as arguments: what counts as
transient, how a component waits for its lock (the extractor logs every refusal of
ZooKeeper, a consumer group once an outage and warms its appliers up meanwhile), what it
does while leading, what it counts and logs when the lock goes. The status a component shows
meanwhile is ``replicator.status_publisher``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_never,
    wait_exponential,
)

from replicator.zk import Leadership


class LockLost(Exception):
    """This process no longer holds its component's lock: another one may be leading."""


def check_lock(lock: Leadership, lost: Callable[[str], LockLost], lock_name: str) -> None:
    """On transaction boundaries: stop leading once the lock has gone with its session.

    ``lock_name`` says which lock in the message (``the leader lock``, ``the group's lock``).
    """
    if lock.lost.is_set():
        raise lost(f"the ZooKeeper session expired and {lock_name} with it")


def lead_until_stopped(lock: Leadership, stopped: Callable[[], bool],
                       acquire: Callable[[], bool], lead: Callable[[], None],
                       on_lost: Callable[[LockLost], None]) -> None:
    """Wait as standby for ``lock`` (``acquire``: False once stopped), then ``lead()``.

    Losing the lock (``lead`` raises ``LockLost``) sends the process back to standby:
    ``on_lost`` says so, and it waits for the lock again and leads anew, as a new process
    would. ``lead`` returning ends the component's life; the lock is released either way.
    """
    while not stopped():
        if not acquire():
            return
        try:
            lead()
            return
        except LockLost as exc:
            on_lost(exc)
        finally:
            lock.release()


def backoff(limit_s: float, transient: Callable[[BaseException], bool],
            sleep: Callable[[float], None],
            on_retry: Callable[[BaseException | None, int], None]) -> Retrying:
    """The retry policy of every component: exponential backoff from 0.5 s to 10 s while
    the failures are ``transient``, for at most ``limit_s`` seconds (0: forever).

    ``sleep`` waits between attempts (and may raise to stop waiting: the operator asked for
    OFFLINE, the lock went); ``on_retry(exc, attempt)`` runs before each wait. The last
    failure is raised as itself once the policy gives up.
    """
    def before_sleep(state: RetryCallState) -> None:
        on_retry(state.outcome.exception() if state.outcome else None, state.attempt_number)

    return Retrying(
        retry=retry_if_exception(transient),
        wait=wait_exponential(multiplier=0.5, max=10),
        stop=stop_after_delay(limit_s) if limit_s else stop_never,
        sleep=sleep, before_sleep=before_sleep, reraise=True)
