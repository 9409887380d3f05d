"""Fragments larger than a Kafka record: cut into chunks on the way in, joined on the way out.

MariaDB allows rows of up to 1 GiB (``max_allowed_packet``); a Kafka record is capped by the
broker's ``message.max.bytes`` and the topic's ``max.message.bytes`` (the THL's default is
8 MiB). Raising the caps only moves the wall, so a fragment whose encoded value is larger than
``chunk_bytes`` travels as consecutive records of one Kafka transaction (``records``: keys
and the ``chunk`` header). A reader joins them before it decodes: no applier, and no data
team reading the THL through ``ThlReader``, ever sees a chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from thl_topics.errors import ThlDecodeError
from thl_topics.records import parse_chunk, parse_key

#: Room left in a chunk's record for its key, headers and the record batch's own bytes.
RECORD_OVERHEAD = 64 * 1024


def chunk_bytes(max_message_bytes: int) -> int:
    """The largest value a record of a topic with this ``max.message.bytes`` carries."""
    return max(max_message_bytes - RECORD_OVERHEAD, 64 * 1024)


def split(value: bytes, size: int) -> Iterator[bytes]:
    """``value`` in pieces of ``size`` bytes (the last one shorter), each a copy made only
    when it is asked for, so a large value is never held twice."""
    view = memoryview(value)
    for start in range(0, len(value), size):
        yield bytes(view[start:start + size])


@dataclass
class Joined:
    """A chunked fragment put back together: its value, and the offsets it spans."""

    value: bytes
    first_offset: int
    last_offset: int


@dataclass
class Joiner:
    """Joins the chunks of one fragment as a reader meets them, in offset order.

    A chunk that does not continue the one before it (another fragment, an index out of
    order) is a ``ThlDecodeError``; the chunks that start a read in the middle of a fragment
    (a window that begins after its first chunk) are skipped: that fragment is not in the
    window.
    """

    topic: str
    _parts: list[bytes] = field(default_factory=list)
    _of: tuple[int, int] | None = None
    _count: int = 0
    _first: int = -1
    _started: bool = False
    #: The fragment whose chunks began the read: not in it.
    _skipping: tuple[int, int] | None = None

    def add(self, key: bytes, value: bytes | None, offset: int) -> Joined | None:
        """One chunk record; the whole value once its last chunk is in, else None."""
        chunk = parse_chunk(key)
        if chunk is None:
            raise ValueError("not a chunk's key")
        index, count = chunk
        of = parse_key(key)
        started, self._started = self._started, True
        if index > 0 and (not started or of == self._skipping) and not self._parts:
            self._skipping = of  # the read began inside this fragment: not in the window
            return None
        self._skipping = None
        if index == 0:
            if self._parts:
                raise self._broken(offset, f"a new fragment starts at chunk 0 of {count} before "
                                           f"chunk {len(self._parts)} of {self._count} of "
                                           f"seqno {self._of}")
            self._of, self._count, self._first = of, count, offset
        elif not self._parts:
            raise self._broken(offset, f"chunk {index} of {count} of seqno {of} without the "
                                       "chunks before it")
        elif of != self._of or count != self._count or index != len(self._parts):
            raise self._broken(offset, f"chunk {index} of {count} of seqno {of} after chunk "
                                       f"{len(self._parts) - 1} of {self._count} of seqno "
                                       f"{self._of}")
        self._parts.append(value or b"")
        if len(self._parts) < count:
            return None
        joined = Joined(b"".join(self._parts), self._first, offset)
        self._parts = []
        self._of = None
        return joined

    def whole(self) -> None:
        """A whole (unchunked) record follows: no fragment may be half joined."""
        if self._parts:
            raise self._broken(-1, f"seqno {self._of} ends after chunk {len(self._parts) - 1} "
                                   f"of {self._count}")
        self._started = True
        self._skipping = None

    @property
    def pending(self) -> bool:
        """True while chunks of a fragment are held (its end not read yet)."""
        return bool(self._parts)

    def _broken(self, offset: int, reason: str) -> ThlDecodeError:
        self._parts = []
        self._of = None
        return ThlDecodeError(f"chunked record broken: {reason}", topic=self.topic,
                              partition=0, offset=offset)
