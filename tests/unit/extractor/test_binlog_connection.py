"""The binlog reader's packet reads: pymysql's packets, errors and sequence checks, with the
socket timeout set once instead of before every read."""

from __future__ import annotations

import io
from typing import Any

import pytest
from pymysql import err
from pymysql.connections import MAX_PACKET_LEN

from extractor.binlog_connection import BinlogConnection


class _Socket:
    def __init__(self) -> None:
        self.timeout: float | None = -1.0
        self.set = 0
        self.closed = False

    def gettimeout(self) -> float | None:
        return self.timeout

    def settimeout(self, value: float | None) -> None:
        self.timeout = value
        self.set += 1

    def close(self) -> None:
        self.closed = True


def _wire(*payloads: bytes, first: int = 0) -> bytes:
    out = b""
    for n, payload in enumerate(payloads):
        out += len(payload).to_bytes(3, "little") + bytes([(first + n) % 256]) + payload
    return out


def _connection(wire: bytes) -> tuple[Any, _Socket]:
    conn: Any = BinlogConnection.__new__(BinlogConnection)
    sock = _Socket()
    conn._sock, conn._rfile = sock, io.BufferedReader(io.BytesIO(wire))
    conn._next_seq_id, conn._read_timeout, conn.encoding, conn._result = 0, None, "utf8", None
    return conn, sock


def test_packets_are_read_whole_and_the_timeout_is_set_once() -> None:
    conn, sock = _connection(_wire(b"\x00first", b"\x00second", b"\x00"))
    assert [conn._read_packet().get_all_data() for _ in range(3)] == [
        b"\x00first", b"\x00second", b"\x00"]
    assert sock.set == 1 and sock.timeout is None
    assert conn._next_seq_id == 3
    sock.timeout = 5.0  # a write set its own timeout: the next read sets the read timeout
    conn._rfile = io.BufferedReader(io.BytesIO(_wire(b"\x00again", first=3)))
    assert conn._read_packet().get_all_data() == b"\x00again"
    assert sock.set == 2 and sock.timeout is None


def test_a_payload_of_16_mib_or_more_comes_in_parts() -> None:
    big = b"\x00" + b"x" * (MAX_PACKET_LEN - 1)
    for tail in (b"end", b""):
        conn, _ = _connection(_wire(big, tail, b"\x00next", first=250))
        conn._next_seq_id = 250
        assert conn._read_packet().get_all_data() == big + tail
        assert conn._read_packet().get_all_data() == b"\x00next"
        assert conn._next_seq_id == (250 + 3) % 256


def test_a_wrong_sequence_number_closes_the_connection() -> None:
    conn, sock = _connection(_wire(b"\x00a", first=7))
    conn._next_seq_id = 5
    with pytest.raises(err.InternalError, match="got 7 expected 5"):
        conn._read_packet()
    assert sock.closed and conn._sock is None
    # Numbered 0 out of turn: MariaDB shutting down.
    conn, sock = _connection(_wire(b"\xff\x01\x00shutdown"))
    conn._next_seq_id = 9
    with pytest.raises(err.OperationalError, match="Lost connection"):
        conn._read_packet()


def test_a_cut_stream_is_a_lost_connection() -> None:
    for wire in (_wire(b"\x00abcdef")[:-2], b"\x05\x00"):
        conn, sock = _connection(wire)
        with pytest.raises(err.OperationalError, match="Lost connection"):
            conn._read_packet()
        assert sock.closed


def test_an_error_packet_raises_the_server_error() -> None:
    payload = b"\xff" + (1236).to_bytes(2, "little") + b"#HY000Could not find first log file"
    conn, _ = _connection(_wire(payload))
    with pytest.raises(err.OperationalError) as caught:
        conn._read_packet()
    assert caught.value.args[0] == 1236
