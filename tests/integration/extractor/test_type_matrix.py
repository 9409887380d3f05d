"""Every MariaDB type's edge values decode from the THL to exactly what the source returns."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from typing import Any

from thl_topics.event import ColumnSpec, RowChange
from thl_topics.values import from_thl

from .conftest import ServiceUnderTest

COLUMNS = """
  id INT PRIMARY KEY,
  u_big BIGINT UNSIGNED, s_big BIGINT, tiny TINYINT, u_tiny TINYINT UNSIGNED,
  small SMALLINT, u_med MEDIUMINT UNSIGNED, i INT, u_i INT UNSIGNED,
  dec65 DECIMAL(65,30), dec_small DECIMAL(10,4),
  f FLOAT, d DOUBLE,
  b64 BIT(64), b1 BIT(1), b9 BIT(9),
  y YEAR,
  t6 TIME(6), t0 TIME,
  dt6 DATETIME(6), dt0 DATETIME,
  ts6 TIMESTAMP(6) NULL DEFAULT NULL, ts0 TIMESTAMP NULL DEFAULT NULL,
  dte DATE,
  e ENUM('a','b','ç😀'), st SET('x','y','z'),
  j JSON,
  vc VARCHAR(50), ch CHAR(5), txt TEXT, ltxt LONGTEXT,
  vb VARBINARY(20), bn BINARY(4), bl BLOB
"""

ROWS = [
    (1, 18446744073709551615, -9223372036854775808, -128, 255, -32768, 16777215, -2147483648,
     4294967295, "99999999999999999999999999999999999.999999999999999999999999999999",
     "-123456.7890", 3.40282e38, 1.7976931348623157e308,
     0xFFFFFFFFFFFFFFFF, 1, 0x1FF, 2155, "-838:59:59.000000", "838:59:59",
     "9999-12-31 23:59:59.999999", "1000-01-01 00:00:00", "2038-01-19 03:14:07.999999",
     "1970-01-01 00:00:01", "9999-12-31", "ç😀", "x,z", '{"k": [1, "é", null]}',
     "héllo wörld 😀 \u0000 end", "ab", "text\nwith\ttabs", "x" * 70000,
     b"\x00\x01\x00\xff", b"\x00\x01", b"\x00" * 3 + b"\xfe" + b"\x00"),
    (2, 0, 9223372036854775807, 127, 0, 32767, 0, 2147483647, 0,
     "-0.000000000000000000000000000001", "0.0000", -1.17549e-38, -2.2250738585072014e-308,
     0, 0, 0, 1901, "-00:00:00.000001", "00:00:00", "0001-01-01 00:00:00.000001",
     "2024-02-29 12:34:56", "1970-01-01 00:00:01.000001", "2024-06-01 12:00:00",
     "0001-01-01", "a", "", "[]", "", "", "", "", b"", b"", b""),
    (3,) + (None,) * 33,
    (4, 1, 1, 1, 1, 1, 1, 1, 1, "1", "1", 0.0, -0.0, 1, 1, 1, 0, "00:00:00", "00:00:00",
     "0000-00-00 00:00:00", "0000-00-00 00:00:00", "0000-00-00 00:00:00",
     "0000-00-00 00:00:00", "0000-00-00", "b", "x,y,z", "{}", " lead", "c", "t", "lt",
     b" ", b"\xff\xff\xff\xff", b"b"),
]


def _normalise(spec: ColumnSpec, value: Any) -> Any:
    """Bring a source value and a THL value to one comparable form, losing nothing."""
    if value is None:
        return None
    if spec.type == "BIT" and isinstance(value, bytes):
        return int.from_bytes(value, "big")
    if spec.type == "FLOAT":
        # The source prints FLOAT with 6 digits; both sides must be the same float32.
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if spec.type == "TIMESTAMP" and isinstance(value, dt.datetime):
        return value.replace(tzinfo=None)
    if spec.type == "DECIMAL":
        return str(value)
    if spec.type == "SET":
        return set(value.split(",")) - {""} if isinstance(value, str) else value
    if spec.type == "TIME" and isinstance(value, dt.timedelta):
        return value
    return value


def test_type_matrix_round_trips_exactly(running: ServiceUnderTest) -> None:
    s = running.schema
    running.sql(f"CREATE TABLE {s}.types ({COLUMNS}) DEFAULT CHARSET=utf8mb4")
    placeholders = ", ".join(["%s"] * len(ROWS[0]))
    for row in ROWS:
        # Zero dates and YEAR 0000 need a permissive sql_mode on the source.
        running.sql("SET SESSION sql_mode = ''",
                    f"INSERT INTO {s}.types VALUES ({placeholders})", params=row)
    events = running.wait_for_seqno(len(ROWS))
    source = running.sql(f"SELECT * FROM {s}.types ORDER BY id")
    thl_rows = []
    for event in events[1:]:
        (change,) = event.data
        assert isinstance(change, RowChange)
        specs = change.column_specs
        thl_rows += [[from_thl(sp, v) for sp, v in zip(specs, r, strict=True)]
                     for r in change.column_values]
    assert len(thl_rows) == len(source) == len(ROWS)
    for src_row, thl_row in zip(source, thl_rows, strict=True):
        for spec, src, got in zip(specs, src_row, thl_row, strict=True):
            assert _normalise(spec, got) == _normalise(spec, src), \
                f"row {src_row[0]} column {spec.name} ({spec.type}): THL {got!r} != {src!r}"
    by_name = {sp.name: sp for sp in specs}
    assert by_name["u_big"].unsigned and not by_name["s_big"].unsigned
    assert (by_name["dec65"].length, by_name["dec65"].scale) == (65, 30)
    assert by_name["e"].enum_values == ["a", "b", "ç😀"]
    assert by_name["vb"].blob and by_name["bl"].type == "BLOB"
    assert by_name["txt"].type == "TEXT" and by_name["txt"].charset is not None
    assert by_name["dt6"].scale == 6
    assert isinstance(Decimal(str(thl_rows[0][9])), Decimal)

