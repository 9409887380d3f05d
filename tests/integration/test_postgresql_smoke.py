"""PostgreSQL takes a round trip through SQLAlchemy Core, as the SQL applier will use it."""

from __future__ import annotations

from decimal import Decimal

import sqlalchemy as sa

from stack.services.postgresql import PostgreSQL


def test_round_trip_through_sqlalchemy(postgresql: PostgreSQL) -> None:
    engine = sa.create_engine(
        f"postgresql+psycopg://postgres@127.0.0.1:{postgresql.port}/postgres"
    )
    meta = sa.MetaData(schema="public")
    table = sa.Table("smoke_rt", meta,
                     sa.Column("id", sa.Numeric(20, 0), primary_key=True, autoincrement=False),
                     sa.Column("b", sa.LargeBinary),
                     sa.Column("d", sa.Numeric(65, 30)),
                     sa.Column("s", sa.Text))
    rows: list[dict[str, object]] = [{"id": Decimal(18446744073709551615), "b": b"\x00\xff\x00",
             "d": Decimal("12345678901234567890123456789012345.123456789012345678901234567890"),
             "s": "ü😀"},
            {"id": Decimal(0), "b": None, "d": None, "s": None}]
    try:
        with engine.begin() as conn:
            meta.create_all(conn)
            conn.execute(sa.insert(table), rows)
        with engine.connect() as conn:
            got = [dict(r._mapping) for r in conn.execute(sa.select(table).order_by(table.c.id))]
        assert got == [rows[1], rows[0]]  # ordered by id
    finally:
        with engine.begin() as conn:
            meta.drop_all(conn)
        engine.dispose()
