"""GTID and XID events read from the packet carry what pymysqlreplication's events carry."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace
from typing import Any

from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import MariadbGtidEvent, XidEvent
from pymysqlreplication.packet import BinLogPacketWrapper

from extractor import row_decoder
from extractor.light_events import light_event

_CTL = SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mariadb")
_ALLOWED = frozenset({MariadbGtidEvent, XidEvent})
_FIELDS = ("gtid", "server_id", "gtid_seq_no", "domain_id", "flags", "xid", "timestamp",
           "event_type", "event_size")


def _packet(event_type: int, body: bytes, checksum: bool, rng: random.Random) -> bytes:
    size = 19 + len(body) + (4 if checksum else 0)
    header = struct.pack("<xIBIIIH", rng.getrandbits(32), event_type, rng.getrandbits(32),
                         size, rng.getrandbits(32), rng.getrandbits(16))
    return header + body + (rng.randbytes(4) if checksum else b"")


def _reference(data: bytes, checksum: bool) -> Any:
    return BinLogPacketWrapper(MysqlPacket(data, "utf8"), {}, _CTL, (10, 11, 0), checksum,
                               _ALLOWED, None, None, None, None, False, False, False, False,
                               False, False, None)


def _bodies(rng: random.Random) -> list[tuple[int, bytes]]:
    gtid = struct.pack("<QIB", rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(8))
    return [(BINLOG.MARIADB_GTID_EVENT, gtid),
            # A group commit id (flag 2) follows the flags: neither reader keeps it.
            (BINLOG.MARIADB_GTID_EVENT, gtid[:-1] + b"\x02" + rng.randbytes(8)),
            (BINLOG.XID_EVENT, struct.pack("<Q", rng.getrandbits(64)))]


def test_the_events_equal_pymysqlreplications() -> None:
    rng = random.Random(11)
    for _ in range(200):
        for checksum in (True, False):
            for event_type, body in _bodies(rng):
                data = _packet(event_type, body, checksum, rng)
                want = _reference(data, checksum)
                got = light_event(data, checksum)
                assert got is not None and type(got) is type(want.event)
                for field in _FIELDS:
                    assert getattr(got, field, None) == getattr(want.event, field, None), field
                assert got.packet.server_id == want.server_id
                assert got.packet.log_pos == want.log_pos
                decoded = row_decoder._wrapper(MysqlPacket(data, "utf8"), {}, _CTL, (10, 11, 0),
                                               checksum, _ALLOWED, None, None, None, None,
                                               False, False, False, False, False, False, None)
                assert (decoded.event_type, decoded.log_pos, decoded.timestamp) == (
                    want.event_type, want.log_pos, want.timestamp)
                assert type(decoded.event) is type(want.event)


def test_other_or_short_packets_are_left_to_the_reference() -> None:
    rng = random.Random(2)
    gtid = struct.pack("<QIB", 1, 2, 3)
    assert light_event(_packet(BINLOG.QUERY_EVENT, gtid, True, rng), True) is None
    assert light_event(_packet(BINLOG.MARIADB_GTID_EVENT, gtid[:-1], False, rng), False) is None
    assert light_event(_packet(BINLOG.XID_EVENT, b"\x01" * 7, True, rng), True) is None
    # Not wanted by the stream: the wrapper does not make it either.
    data = _packet(BINLOG.XID_EVENT, b"\x01" * 8, True, rng)
    decoded = row_decoder._wrapper(MysqlPacket(data, "utf8"), {}, _CTL, (10, 11, 0), True,
                                   frozenset({MariadbGtidEvent}), None, None, None, None,
                                   False, False, False, False, False, False, None)
    assert decoded.event is None
