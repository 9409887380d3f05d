"""MariaDB's GTID and XID events read straight from the packet, without a packet wrapper.

Every source transaction opens with a GTID event and ends with an XID event: two of every
eleven events of a ten-row OLTP transaction. pymysqlreplication builds a packet wrapper and a
full event object for each (header parsing, checksum handling, a DBMS lookup); after the rows
decoder and the compiled loops that was the largest single cost left in its fetch loop. The
body of both is a few fixed fields, so this module makes the same event classes (the fetch
loop and the assembler match them by class) with the same fields, from the bytes.

Only the fields pymysqlreplication's own ``__init__`` sets from the body and header are set:
``gtid``, ``server_id``, ``gtid_seq_no``, ``domain_id``, ``flags`` (GTID), ``xid`` (XID),
plus ``timestamp``, ``event_type``, ``event_size`` and ``packet`` (the header's fields). The
unit tests hold them equal to pymysqlreplication's on the same packets.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import MariadbGtidEvent, XidEvent

#: The OK byte, then the common header: timestamp, type, server id, size, next position,
#: flags.
_HEADER = struct.Struct("<xIBIIIH")
_BODY = 1 + 19
_CHECKSUM_LEN = 4
_GTID = struct.Struct("<QIB")  # sequence number, domain id, flags
_XID = struct.Struct("<Q")


@dataclass(slots=True, frozen=True)
class Header:
    """The common header's fields, where pymysqlreplication's events keep their packet."""

    timestamp: int
    event_type: int
    server_id: int
    event_size: int
    log_pos: int
    flags: int


def light_event(data: bytes, use_checksum: bool) -> Any | None:
    """A GTID or XID event read from ``data`` (a whole packet, OK byte first), or None when
    the packet is another event or too short for its fields (the reference then says why)."""
    event_type = data[5]
    if event_type == BINLOG.MARIADB_GTID_EVENT:
        body = _GTID
    elif event_type == BINLOG.XID_EVENT:
        body = _XID
    else:
        return None
    if len(data) < _BODY + body.size + (_CHECKSUM_LEN if use_checksum else 0):
        return None
    header = Header(*_HEADER.unpack_from(data))
    event: Any
    if body is _GTID:
        event = MariadbGtidEvent.__new__(MariadbGtidEvent)
        event.gtid_seq_no, event.domain_id, event.flags = _GTID.unpack_from(data, _BODY)
        event.server_id = header.server_id
        event.gtid = f"{event.domain_id}-{header.server_id}-{event.gtid_seq_no}"
    else:
        event = XidEvent.__new__(XidEvent)
        (event.xid,) = _XID.unpack_from(data, _BODY)
    event.packet = header
    event.event_type = event_type
    event.timestamp = header.timestamp
    # pymysqlreplication's event size: without the common header and the checksum.
    event.event_size = header.event_size - 19 - (_CHECKSUM_LEN if use_checksum else 0)
    return event
