"""Consumer errors in DESIGN.md's three kinds: transient, data, terminal."""

from __future__ import annotations

from collections.abc import Sequence


class ConsumerError(Exception):
    """Something stopped a consumer; the message says where (seqno, topic, target)."""

    code = "ERROR"

    def __init__(self, message: str, *, seqno: int = -1, event_id: str = "") -> None:
        super().__init__(message)
        self.seqno = seqno
        self.event_id = event_id


class TransientError(ConsumerError):
    """The target or the broker is unreachable: retry with backoff from the stored position."""

    code = "TRANSIENT"


class PositionConflict(ConsumerError):
    """The target's stored position moved under this consumer: another process applies the
    same group to the same target. Nothing of the block was committed."""

    code = "CONFLICT"


class DataError(ConsumerError):
    """The target refused this transaction's data: stop at its seqno until an operator acts."""

    code = "DATA"


def key_changed(target: str, table: str, old: str, new: Sequence[str], seqno: int,
                holder: str, remove: str) -> DataError:
    """The error of a store that finds rows by their primary key's values when the source's
    key changed under rows it holds (``old``: the key they were written by, as far as
    known; ``holder``: where they are; ``remove``: how to empty it)."""
    return DataError(
        f"{target}: the primary key of {table} changed from {old} to ({', '.join(new)}) on "
        f"the source (seqno {seqno}); the {holder} holds rows found by the old key, which "
        f"changes by the new key would miss. To repair: {remove}, "
        f"request the table again (`trepctl provision -table {table}`), then `trepctl "
        "online` this group", seqno=seqno)


class TerminalError(ConsumerError):
    """The log itself is unusable for this consumer (diverged, gap, undecodable)."""

    code = "TERMINAL"


class EpochMismatch(TerminalError):
    """The THL at the stored seqno is not the log the target was applied from."""

    code = "EPOCH"


class SeqnoGap(TerminalError):
    """A seqno is missing from the THL: never apply past a hole."""

    code = "GAP"


class Purged(TerminalError):
    """The THL no longer holds the events this group needs next (purged below them)."""

    code = "PURGED"
