"""XA transactions: prepared in the binlog long before they commit, published as committed.

MariaDB 10.5+ writes an XA transaction's rows when it is prepared: a GTID event flagged
``FL_PREPARED_XA``, the rows events, ``XA END``, then an XA_prepare event carrying the xid.
Its outcome comes later as an event group of its own (a GTID flagged ``FL_COMPLETED_XA`` and
the query ``XA COMMIT X'..',X'..',n`` or ``XA ROLLBACK ...``), possibly much later, after
other transactions, from another session or after a server restart. ``XA COMMIT ... ONE
PHASE`` is logged like an ordinary transaction.

The THL holds source transactions in commit order, so a prepared transaction waits here,
fragment by fragment in a spool (memory up to one fragment's bytes, then a temporary file),
until its outcome: a commit publishes it as one THL transaction at the commit's place, a
rollback drops it. What is still prepared travels in the metadata of every THL event
(``xa_open``: xid -> the binlog position its prepare group starts at), so a restart from the
THL tail reads the binlog again from the oldest open prepare (``CatchUp``) and collects
those prepares again, without publishing anything it already published.
"""

from __future__ import annotations

import json
import re
import struct
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from extractor.binlog_position import BinlogPosition
from thl_topics.codec import ThlCodec
from thl_topics.event import DataItem, ThlEvent

#: MariaDB GTID event flags.
FL_PREPARED_XA = 64
FL_COMPLETED_XA = 128
#: Event metadata: the XA transactions prepared and not yet decided at this event (JSON
#: object: xid -> EVENTID of the binlog position where the prepare's event group starts).
META_XA_OPEN = "xa_open"
#: Event metadata of a published XA transaction: its xid, as the binlog writes it.
META_XA_XID = "xa_xid"
#: Event metadata of a published XA transaction: the GTID of its prepare.
META_XA_PREPARE_GTID = "xa_prepare_gtid"

# The xid as MariaDB writes it in XA END / XA COMMIT / XA ROLLBACK: X'gtrid',X'bqual',fmt.
_XID = r"X'(?P<gtrid>[0-9A-Fa-f]*)',X'(?P<bqual>[0-9A-Fa-f]*)',(?P<fmt>-?\d+)"
_OUTCOME = re.compile(rf"\s*XA\s+(?P<verb>COMMIT|ROLLBACK)\s+{_XID}\s*(?P<rest>.*)$",
                      re.IGNORECASE | re.DOTALL)
_END = re.compile(rf"\s*XA\s+END\s+{_XID}", re.IGNORECASE)


def xid_text(format_id: int, gtrid: bytes, bqual: bytes) -> str:
    """The xid in the binlog's own notation, ``X'7831',X'',1`` (hex in lower case)."""
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


_TEXT = re.compile(rf"^{_XID}$")


def xid_display(xid: str) -> str:
    """An xid as a person wrote it: ``'a3'`` (``'a3','b',7`` with a branch or another
    format), or the binlog's hex form when it is not printable text."""
    match = _TEXT.match(xid)
    if match is None:
        return xid
    try:
        parts = [bytes.fromhex(match[p]).decode("ascii") for p in ("gtrid", "bqual")]
    except UnicodeDecodeError:
        return xid
    if not all(p.isprintable() and "'" not in p for p in parts):
        return xid
    gtrid, bqual = parts
    if not bqual and match["fmt"] == "1":
        return f"'{gtrid}'"
    return f"'{gtrid}','{bqual}',{match['fmt']}"


def _normal(match: re.Match[str]) -> str:
    return xid_text(int(match["fmt"]), bytes.fromhex(match["gtrid"]),
                    bytes.fromhex(match["bqual"]))


@dataclass(frozen=True)
class Outcome:
    """An ``XA COMMIT`` or ``XA ROLLBACK`` of a prepared transaction."""

    commit: bool
    xid: str
    one_phase: bool = False


def outcome(sql: str) -> Outcome | None:
    """The XA decision a query states, or None if it is not one."""
    match = _OUTCOME.match(sql)
    if match is None:
        return None
    return Outcome(commit=match["verb"].upper() == "COMMIT", xid=_normal(match),
                   one_phase="ONE" in match["rest"].upper())


def is_xa_end(sql: str) -> bool:
    """True for the ``XA END`` statement that closes a prepare group's rows."""
    return _END.match(sql) is not None


class Spool:
    """The fragments of one prepared transaction, in order: in memory up to ``memory_bytes``,
    then in a temporary file, so an XA transaction of any size costs the extractor one
    fragment's memory, like any fragmented transaction."""

    _LEN = struct.Struct(">I")

    def __init__(self, memory_bytes: int, codec: ThlCodec | None = None) -> None:
        self._codec = codec or ThlCodec()
        self._file = tempfile.SpooledTemporaryFile(max_size=memory_bytes,
                                                   prefix="trep-xa-")
        self.fragments = 0
        self.bytes = 0

    def write(self, items: list[DataItem]) -> None:
        """One fragment's items (the event around them is stamped when it commits)."""
        data = self._codec.encode(ThlEvent(seqno=0, epoch=0, source_id="", event_id="",
                                           shard_id="", tstamp=0, data=items))
        self._file.write(self._LEN.pack(len(data)))
        self._file.write(data)
        self.fragments += 1
        self.bytes += len(data)

    def read(self) -> Iterator[list[DataItem]]:
        """The fragments' items, in the order written (once: the spool is then closed)."""
        try:
            self._file.seek(0)
            for _ in range(self.fragments):
                (size,) = self._LEN.unpack(self._file.read(self._LEN.size))
                yield self._codec.decode(self._file.read(size)).data
        finally:
            self.close()

    def close(self) -> None:
        self._file.close()


@dataclass
class Prepared:
    """An XA transaction prepared in the binlog and not yet decided."""

    xid: str
    #: Where its prepare's event group starts: a restart reads the binlog again from here.
    start: BinlogPosition
    spool: Spool
    gtid: str | None = None
    server_id: int = 0
    session: int = 0
    rows: int = 0
    #: When the extractor read the prepare (monotonic clock), for "open for N s".
    seen_at: float = field(default_factory=time.monotonic)

    @property
    def replicated(self) -> bool:
        """It changes something replicated (a prepare whose every change the filters drop
        is still tracked, for its outcome, but holds back nothing an operator must see)."""
        return self.spool.fragments > 0


def encode_open(prepared: dict[str, Prepared]) -> str:
    """The ``xa_open`` metadata of an event."""
    return json.dumps({xid: p.start.event_id() for xid, p in prepared.items()},
                      sort_keys=True)


def decode_open(metadata: dict[str, str]) -> dict[str, BinlogPosition]:
    """The open prepares an event's metadata lists (none if it lists none)."""
    raw = metadata.get(META_XA_OPEN)
    if not raw:
        return {}
    return {xid: BinlogPosition.parse(event_id) for xid, event_id in json.loads(raw).items()}


@dataclass(frozen=True)
class CatchUp:
    """A restart while XA transactions were open: read the binlog from the oldest open
    prepare up to ``until`` (the THL tail's position) collecting only those prepares; what
    else is there was published already."""

    until: BinlogPosition
    wanted: dict[str, BinlogPosition]

    @property
    def start(self) -> BinlogPosition:
        return min(self.wanted.values(), key=BinlogPosition.order)
