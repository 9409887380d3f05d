"""Tungsten's tracking schema ``tungsten_<service>``: the five tables of seeds/003.

Defined once with SQLAlchemy Core so every SQL dialect (MariaDB/MySQL source and targets,
PostgreSQL, Oracle) gets the same tables with its own types.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
from sqlalchemy.dialects import mysql

#: Microseconds where the dialect has them, so heartbeat lag is measured in milliseconds.
TIMESTAMP = sa.TIMESTAMP(timezone=False).with_variant(mysql.TIMESTAMP(fsp=6), "mysql", "mariadb")


def tracking_metadata(schema: str) -> sa.MetaData:
    """The five tracking tables in ``schema``."""
    meta = sa.MetaData(schema=schema)
    sa.Table(
        "trep_commit_seqno", meta,
        sa.Column("task_id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("seqno", sa.BigInteger), sa.Column("fragno", sa.SmallInteger),
        sa.Column("last_frag", sa.CHAR(1)), sa.Column("source_id", sa.String(128)),
        sa.Column("epoch_number", sa.BigInteger), sa.Column("eventid", sa.String(128)),
        sa.Column("applied_latency", sa.Integer), sa.Column("update_timestamp", TIMESTAMP),
        sa.Column("shard_id", sa.String(128)), sa.Column("extract_timestamp", TIMESTAMP),
        sa.Column("connection_id", sa.BigInteger),
    )
    sa.Table(
        "heartbeat", meta,
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("seqno", sa.BigInteger), sa.Column("eventid", sa.String(128)),
        sa.Column("source_tstamp", TIMESTAMP), sa.Column("target_tstamp", TIMESTAMP),
        sa.Column("lag_millis", sa.BigInteger), sa.Column("salt", sa.BigInteger),
        sa.Column("name", sa.String(128)),
    )
    sa.Table(
        "consistency", meta,
        sa.Column("db", sa.CHAR(64), primary_key=True),
        sa.Column("tbl", sa.CHAR(64), primary_key=True),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("row_offset", sa.Integer, nullable=False),
        sa.Column("row_limit", sa.Integer, nullable=False),
        sa.Column("this_crc", sa.CHAR(40)), sa.Column("this_cnt", sa.Integer),
        sa.Column("master_crc", sa.CHAR(40)), sa.Column("master_cnt", sa.Integer),
        sa.Column("ts", TIMESTAMP), sa.Column("method", sa.CHAR(32)),
    )
    sa.Table(
        "trep_shard", meta,
        sa.Column("shard_id", sa.String(128), primary_key=True),
        sa.Column("master", sa.String(128)), sa.Column("critical", sa.SmallInteger),
    )
    sa.Table(
        "trep_shard_channel", meta,
        sa.Column("shard_id", sa.String(128), primary_key=True),
        sa.Column("channel", sa.Integer),
    )
    return meta


def audit_table(schema: str) -> sa.Table:
    """``trep_apply_audit``: one row per seqno each time a block applying it commits.

    Optional (``audit_seqnos``), for tests that prove each seqno was applied exactly once:
    no key, so a second application would show as a second row.
    """
    return sa.Table("trep_apply_audit", sa.MetaData(schema=schema),
                    sa.Column("seqno", sa.BigInteger, nullable=False, index=True),
                    sa.Column("applied_at", TIMESTAMP))


@dataclass(frozen=True)
class CommitSeqno:
    """One row of ``trep_commit_seqno``: a position, on a transaction boundary."""

    seqno: int
    epoch: int
    eventid: str
    source_id: str
    shard_id: str = ""
    fragno: int = 0
    last_frag: bool = True
    task_id: int = 0
    applied_latency: int = 0
    extract_timestamp: dt.datetime | None = None

    def row(self) -> dict[str, object]:
        return {
            "task_id": self.task_id, "seqno": self.seqno, "fragno": self.fragno,
            "last_frag": "1" if self.last_frag else "0", "source_id": self.source_id,
            "epoch_number": self.epoch, "eventid": self.eventid,
            "applied_latency": self.applied_latency,
            "update_timestamp": dt.datetime.now(dt.UTC).replace(tzinfo=None),
            "shard_id": self.shard_id, "extract_timestamp": self.extract_timestamp,
            "connection_id": None,
        }


class CommitSeqnoTable:
    """Reads and writes ``trep_commit_seqno`` inside the caller's transaction."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.metadata = tracking_metadata(schema)
        self.table = self.metadata.tables[f"{schema}.trep_commit_seqno"]
        self._lock: sa.Select[tuple[int]] | None = None
        self._advance: sa.Update | None = None

    def create(self, conn: sa.Connection) -> None:
        """Create the schema (where the dialect has them) and the five tables if missing."""
        if conn.dialect.name in ("mysql", "mariadb", "postgresql"):
            q = conn.dialect.identifier_preparer.quote(self.schema)
            conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {q}"))
        self.metadata.create_all(conn)

    def read(self, conn: sa.Connection, task_id: int = 0) -> CommitSeqno | None:
        t = self.table
        row = conn.execute(sa.select(t).where(t.c.task_id == task_id)).mappings().first()
        if row is None or row["seqno"] is None:
            return None
        return CommitSeqno(
            seqno=row["seqno"], epoch=row["epoch_number"], eventid=row["eventid"] or "",
            source_id=row["source_id"] or "", shard_id=row["shard_id"] or "",
            fragno=row["fragno"] or 0, last_frag=row["last_frag"] != "0", task_id=task_id,
            applied_latency=row["applied_latency"] or 0,
            extract_timestamp=row["extract_timestamp"],
        )

    def write(self, conn: sa.Connection, pos: CommitSeqno) -> None:
        """Upsert the row of ``pos.task_id`` (portable: update, insert if nothing changed)."""
        t = self.table
        values = pos.row()
        done = conn.execute(sa.update(t).where(t.c.task_id == pos.task_id).values(values))
        if done.rowcount == 0:
            conn.execute(sa.insert(t).values(values))

    def lock(self, conn: sa.Connection, task_id: int = 0) -> int | None:
        """The stored seqno, read with a row lock held until the caller's transaction ends.

        Two writers of one position serialize here: the second one waits for the first to
        commit and then sees the seqno it wrote.
        """
        row = conn.execute(self.lock_statement(), {"w_task_id": task_id}).first()
        return None if row is None else row[0]

    def lock_statement(self) -> sa.Select[tuple[int]]:
        """``lock`` as one statement: bind ``w_task_id``; built once per table."""
        if self._lock is None:
            t = self.table
            self._lock = sa.select(t.c.seqno).where(
                t.c.task_id == sa.bindparam("w_task_id")).with_for_update()
        return self._lock

    def advance_statement(self) -> sa.Update:
        """``advance`` from a stored position as one statement, built once per table.

        Binds ``w_task_id`` and ``w_seqno`` (the expected stored seqno) and ``v_<column>``
        for each column of ``CommitSeqno.row()``; it must match exactly one row.
        """
        if self._advance is None:
            t = self.table
            self._advance = sa.update(t).where(
                t.c.task_id == sa.bindparam("w_task_id"),
                t.c.seqno == sa.bindparam("w_seqno")).values(
                {c: sa.bindparam(f"v_{c.name}") for c in t.c})
        return self._advance

    @staticmethod
    def advance_params(pos: CommitSeqno, expected: int) -> dict[str, object]:
        """The parameters of ``advance_statement`` moving ``expected`` to ``pos``."""
        params: dict[str, object] = {f"v_{k}": v for k, v in pos.row().items()}
        params.update(w_task_id=pos.task_id, w_seqno=expected)
        return params

    def advance(self, conn: sa.Connection, pos: CommitSeqno, expected: int | None) -> None:
        """Move the position from ``expected`` (None: no position yet) to ``pos``.

        Raises PositionMoved when the stored seqno is not ``expected``: someone else wrote
        the position since it was read.
        """
        if expected is None:
            try:
                conn.execute(sa.insert(self.table).values(pos.row()))
            except sa_exc.IntegrityError as exc:
                # Inserted meanwhile by a writer whose transaction we waited for.
                raise PositionMoved(expected, None, "a position written meanwhile") from exc
            return
        done = conn.execute(self.advance_statement(), self.advance_params(pos, expected))
        if done.rowcount != 1:
            raise PositionMoved(expected, self.stored(conn, pos.task_id))

    def stored(self, conn: sa.Connection, task_id: int) -> int | None:
        """The stored seqno, read without a lock (None: no position)."""
        t = self.table
        row = conn.execute(sa.select(t.c.seqno).where(t.c.task_id == task_id)).first()
        return None if row is None else row[0]


class PositionMoved(Exception):
    """The stored position is not the one this writer read: another writer moved it."""

    def __init__(self, expected: int | None, found: int | None, what: str = "") -> None:
        super().__init__(f"expected stored seqno {_show(expected)}, found "
                         f"{what or _show(found)}")
        self.expected = expected
        self.found = found


def _show(seqno: int | None) -> str:
    return "none" if seqno is None else str(seqno)
