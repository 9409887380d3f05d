"""How much SQL text one round trip carries: a quarter of the server's max_allowed_packet
(a character may take 4 bytes), at most ``_ROUND_TRIP_BYTES``, never below one statement."""

from __future__ import annotations

import pytest

from consumers.sql.batches import _ROUND_TRIP_BYTES, _STATEMENT_BYTES, BatchWriter


@pytest.mark.parametrize(("max_packet", "expected"), [
    (64 << 20, _ROUND_TRIP_BYTES),   # MySQL 8's default: the cap
    (16 << 20, 4 << 20),             # MariaDB's default
    (4 << 20, _STATEMENT_BYTES),     # MySQL 5.7's default: one statement's worth
    (1 << 20, _STATEMENT_BYTES),     # never below a statement (the server refuses those)
])
def test_round_trips_fit_the_servers_packet(max_packet: int, expected: int) -> None:
    writer = BatchWriter.__new__(BatchWriter)
    writer.fit_round_trips(max_packet)
    assert writer.round_trip_bytes == expected
