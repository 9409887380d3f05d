"""The unanswered round trip on MariaDB/MySQL: the same bytes as PyMySQL's own query."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest
from pymysql.constants import COMMAND

from consumers.sql.mysqlwire import send_query


class Socket:
    """A socket that takes at most ``chunk`` bytes per write, as a full send buffer does."""

    def __init__(self, chunk: int = 1 << 30, fail: bool = False) -> None:
        self.chunk = chunk
        self.fail = fail
        self.out = bytearray()
        self.calls = 0
        self.timeout: float | None = None

    def settimeout(self, value: float | None) -> None:
        self.timeout = value

    def sendmsg(self, buffers: list[memoryview]) -> int:
        self.calls += 1
        if self.fail:
            raise ConnectionResetError("reset by peer")
        data = b"".join(bytes(b) for b in buffers)[:self.chunk]
        self.out += data
        return len(data)

    def sendall(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        pass


def connection(sock: Socket) -> Any:
    conn: Any = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4",
                                               write_timeout=7)
    conn._sock = sock
    conn._result = None
    return conn


def pymysql_bytes(text: str) -> bytes:
    sock = Socket()
    conn = connection(sock)
    conn._execute_command(COMMAND.COM_QUERY, text.encode("utf8", "surrogateescape"))
    return bytes(sock.out)


STATEMENTS = ["INSERT INTO `t` VALUES (1,'a'),(2,X'e282ac')",
              "UPDATE `t` SET `v`='\u20ac \U0001f600' WHERE `id`=3",
              "DELETE FROM `t` WHERE `id` IN (4,5)"]


@pytest.mark.parametrize("lead", ["", "COMMIT;\n"])
@pytest.mark.parametrize("chunk", [1 << 30, 1, 7, 100])
def test_the_packet_is_pymysqls_whatever_the_socket_takes_at_once(lead: str, chunk: int
                                                                   ) -> None:
    sock = Socket(chunk)
    conn = connection(sock)
    send_query(conn.cursor(), STATEMENTS, lead)
    assert bytes(sock.out) == pymysql_bytes(lead + ";\n".join(STATEMENTS))
    assert sock.timeout == 7
    assert conn._next_seq_id == 1
    assert chunk > 1 or sock.calls == len(sock.out)


def test_many_statements_go_in_several_writes_of_bounded_buffers() -> None:
    statements = [f"DELETE FROM `t` WHERE `id`={i}" for i in range(2000)]
    sock = Socket()
    conn = connection(sock)
    send_query(conn.cursor(), statements)
    assert bytes(sock.out) == pymysql_bytes(";\n".join(statements))
    assert sock.calls > 1


def test_a_text_over_one_packet_is_split_as_pymysql_splits_it() -> None:
    statements = ["SELECT '" + "x" * (1 << 23) + "'"] * 3  # 24 MiB: two packets
    sock = Socket()
    conn = connection(sock)
    send_query(conn.cursor(), statements)
    assert bytes(sock.out) == pymysql_bytes(";\n".join(statements))


def test_a_failed_write_closes_the_connection_and_says_the_server_has_gone() -> None:
    conn = connection(Socket(fail=True))
    with pytest.raises(pymysql.OperationalError, match="server has gone away"):
        send_query(conn.cursor(), STATEMENTS)
    assert conn._sock is None


def test_a_closed_connection_is_refused() -> None:
    conn = connection(Socket())
    conn._sock = None
    with pytest.raises(pymysql.InterfaceError):
        send_query(conn.cursor(), STATEMENTS)
