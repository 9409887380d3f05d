"""The binlog reader's MySQL connection: pymysql's, with a cheaper read of each packet.

A binlog stream is read a packet per event, several hundred thousand a second at full speed.
pymysql's ``_read_packet`` sets the socket's timeout before each of its two reads per packet
(the header, then the payload), and ``socket.settimeout`` is a system call every time: on the
extractor's profile that was as much CPU as decoding the rows. This connection sets the
timeout only when it is not the read timeout already (a write sets its own), and hands a
packet's payload to the packet as it was read when it is not split over several packets.
Everything else (errors, sequence numbers, packets of 16 MiB and more) is pymysql's.
"""

from __future__ import annotations

import errno
from typing import Any

from pymysql import err
from pymysql.connections import MAX_PACKET_LEN, Connection
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket


class BinlogConnection(Connection):
    """A pymysql connection for ``BinLogStreamReader(pymysql_wrapper=...)``.

    pymysql's type stubs do not declare its private state, so it is read through ``Any``.
    """

    def _read_packet(self, packet_type: Any = MysqlPacket) -> Any:
        me: Any = self
        sock = me._sock
        if sock is None:
            return me._read_packet_unchanged(packet_type)
        if sock.gettimeout() != me._read_timeout:
            sock.settimeout(me._read_timeout)
        data = self._read_part()
        if len(data) == MAX_PACKET_LEN:
            # A payload of 16 MiB or more comes in parts; the last one is shorter.
            whole = bytearray(data)
            while True:
                part = self._read_part()
                whole += part
                if len(part) < MAX_PACKET_LEN:
                    break
            data = bytes(whole)
        packet = packet_type(data, self.encoding)
        if packet.is_error_packet():
            if me._result is not None and me._result.unbuffered_active is True:
                me._result.unbuffered_active = False
            packet.raise_for_error()
        return packet

    def _read_packet_unchanged(self, packet_type: Any) -> Any:
        base: Any = Connection
        return base._read_packet(self, packet_type)

    def _read_part(self) -> bytes:
        """One wire packet's payload, its sequence number checked as pymysql checks it."""
        me: Any = self
        header = self._read_exact(4)
        number = header[3]
        if number != me._next_seq_id:
            me._force_close()
            if number == 0:
                # MariaDB sends an error packet numbered 0 when it shuts down.
                raise err.OperationalError(CR.CR_SERVER_LOST,
                                           "Lost connection to MySQL server during query")
            raise err.InternalError(
                f"Packet sequence number wrong - got {number} expected {me._next_seq_id}")
        me._next_seq_id = (number + 1) % 256
        return self._read_exact(header[0] | header[1] << 8 | header[2] << 16)

    def _read_exact(self, size: int) -> bytes:
        """pymysql's ``_read_bytes`` without setting the timeout again."""
        me: Any = self
        while True:
            try:
                data: bytes = me._rfile.read(size)
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                me._force_close()
                raise err.OperationalError(
                    CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
                ) from exc
            except BaseException:
                me._force_close()
                raise
        if len(data) < size:
            me._force_close()
            raise err.OperationalError(CR.CR_SERVER_LOST,
                                       "Lost connection to MySQL server during query")
        return data
