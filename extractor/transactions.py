"""Assembling binlog events into THL events: whole transactions, in commit order, fragmented.

A transaction is BEGIN .. XID (or COMMIT for non-transactional engines); a query outside
BEGIN (DDL, statement-format DML with autocommit) is a transaction of its own. Row changes
are cut into fragments of ``fragment_rows`` rows / ``fragment_bytes`` bytes as they arrive,
so a huge transaction is never held whole in memory. A transaction takes its seqno only
when its first fragment is emitted; one that filters to nothing takes none.

XA transactions are held from their prepare to their outcome (``extractor.xa``) and take
their seqno, like any transaction, where they commit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XAPrepareEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from extractor.binlog_position import BinlogPosition
from extractor.ddl_parser import is_table_ddl, read_schema_changes
from extractor.errors import ExtractorError
from extractor.foreign_keys import ForeignKeyCatalog
from extractor.row_decoder import NO_FOREIGN_KEY_CHECKS, DecodedRows
from extractor.row_values import TableShape, shape_of
from extractor.xa import (
    FL_PREPARED_XA,
    META_XA_OPEN,
    META_XA_PREPARE_GTID,
    META_XA_XID,
    CatchUp,
    Outcome,
    Prepared,
    Spool,
    encode_open,
    is_xa_end,
    outcome,
    xid_display,
    xid_text,
)
from replicator.filters import FilterChain, ItemFilter
from replicator.sql_names import statement_target
from thl_topics.event import DataItem, RowAction, RowChange, Statement, ThlEvent, ThlValue
from thl_topics.records import META_FOREIGN_KEYS, META_PROVISION, META_PROVISIONING
from thl_topics.schema_change import SchemaChange

log = logging.getLogger(__name__)

# flags2 bits of a query event (MySQL's OPTION_* constants).
_OPTION_AUTO_IS_NULL = 1 << 14
_OPTION_NOT_AUTOCOMMIT = 1 << 19
_OPTION_NO_FOREIGN_KEY_CHECKS = 1 << 26
_OPTION_RELAXED_UNIQUE_CHECKS = 1 << 27
# MariaDB GTID event flag: the event group is one statement without BEGIN/COMMIT.
_FL_STANDALONE = 1


def session_options(event: QueryEvent) -> dict[str, str]:
    """The session OPTIONS a statement ran under, from its query event's status variables."""
    opts: dict[str, str] = {}
    flags2 = getattr(event, "flags2", None)
    if flags2 is not None:
        opts["autocommit"] = "0" if flags2 & _OPTION_NOT_AUTOCOMMIT else "1"
        opts["sql_auto_is_null"] = "1" if flags2 & _OPTION_AUTO_IS_NULL else "0"
        opts["foreign_key_checks"] = "0" if flags2 & _OPTION_NO_FOREIGN_KEY_CHECKS else "1"
        opts["unique_checks"] = "0" if flags2 & _OPTION_RELAXED_UNIQUE_CHECKS else "1"
    sql_mode = getattr(event, "sql_mode", None)
    if sql_mode is not None:
        # Numeric, as the binlog has it: SET sql_mode=<number> is valid on MySQL and MariaDB.
        opts["sql_mode"] = str(sql_mode)
    tz = getattr(event, "time_zone", None)
    opts["time_zone"] = tz.decode() if isinstance(tz, bytes) else "+00:00"
    for name in ("character_set_client", "collation_connection", "collation_server"):
        value = getattr(event, name, None)
        if value is not None:
            opts[name] = str(value)
    return opts


@dataclass
class _Open:
    """The transaction being assembled."""

    tstamp: int
    session: int = 0
    server_id: int = 0
    gtid: str | None = None
    seqno: int | None = None
    shard: str = ""
    fragno: int = 0
    items: list[DataItem] = field(default_factory=list)
    rows: int = 0
    size: int = 0
    #: Where its event group starts in the binlog.
    start: BinlogPosition | None = None
    #: An XA prepare group: its fragments go to ``spool`` until the outcome is read.
    spool: Spool | None = None
    #: Read again while catching up after a restart: published already, nothing to emit.
    discard: bool = False
    #: Rows already in the spool.
    held: int = 0
    #: ids of row changes made with ``foreign_key_checks=0``: InnoDB cascaded nothing.
    unchecked: set[int] = field(default_factory=set)


Emit = Callable[[ThlEvent], None]


class TransactionAssembler:
    """Feeds on binlog events; emits THL events through ``emit`` in commit order."""

    def __init__(self, *, emit: Emit, next_seqno: int, epoch: int, service: str,
                 source_id: str, filters: ItemFilter,
                 fragment_rows: int, fragment_bytes: int,
                 chain: FilterChain | None = None,
                 start: BinlogPosition | None = None,
                 catch_up: CatchUp | None = None,
                 foreign_keys: ForeignKeyCatalog | None = None) -> None:
        self._emit = emit
        self.next_seqno = next_seqno
        self.epoch = epoch
        self.service = service
        self.source_id = source_id
        self.filters = filters
        self.fragment_rows = fragment_rows
        self.fragment_bytes = fragment_bytes
        #: The extract-stage filter chain, after replicate/ignore.
        self.chain = chain or FilterChain()
        self._open: _Open | None = None
        self._gtid: str | None = None
        self._last_time = 0
        #: Where the last event group ended (where the next one starts).
        self._boundary = start
        #: XA transactions prepared and not yet committed or rolled back, by xid.
        self.prepared: dict[str, Prepared] = {}
        #: XA outcomes read whose prepare this extractor never saw (it precedes the start).
        self.unknown_outcomes = 0
        #: Table DDL statements published without schema-change items (not understood).
        self.ddl_not_understood = 0
        self._catch_up = catch_up if catch_up is not None and catch_up.wanted else None
        #: Tables being provisioned: their binlog changes are marked (``provisioning``) so
        #: that targets apply them idempotently until the table's last chunk.
        self.provisioning: set[tuple[str, str]] = set()
        #: The source's cascading foreign keys (None: not attached to the THL).
        self.foreign_keys = foreign_keys

    @property
    def in_transaction(self) -> bool:
        """True between BEGIN and its commit: the position is not a restart point."""
        return self._open is not None

    @property
    def catching_up(self) -> bool:
        """True while reading again, after a restart, what the THL holds already."""
        return self._catch_up is not None

    def feed(self, event: Any, position: BinlogPosition) -> None:
        """One binlog event; ``position`` is where the next event starts."""
        if self._catch_up is not None and self._open is None:
            self._leave_catch_up()
        # The last event's header time is the commit time when the transaction ends.
        self._last_time = event.timestamp
        if isinstance(event, MariadbGtidEvent):
            self._gtid = event.gtid
            # MariaDB sends a GTID event where MySQL sends BEGIN; a standalone one (DDL)
            # is followed by its single query, which commits by itself.
            if not event.flags & _FL_STANDALONE:
                txn = self._begin(event, session=0)
                if event.flags & FL_PREPARED_XA:
                    self._hold(txn)
        elif isinstance(event, XAPrepareEvent):
            self._prepare(event, position)
        elif isinstance(event, QueryEvent):
            self._query(event, position)
        elif isinstance(event, DecodedRows):
            self._decoded_rows(event, position)
        elif isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            self._rows(event, position)
        elif isinstance(event, XidEvent):
            self._commit(position)

    def _query(self, event: QueryEvent, position: BinlogPosition) -> None:
        sql = event.query
        if sql == "BEGIN":
            if self._open is None:
                self._begin(event, session=event.slave_proxy_id)
            else:
                self._open.session = event.slave_proxy_id
            return
        if sql == "COMMIT":
            self._commit(position)
            return
        txn = self._open
        if txn is not None and (txn.discard or (txn.spool is not None and is_xa_end(sql))):
            return  # XA END closes the rows of a prepare: no statement of the transaction
        if sql[:8].upper() == "XA START":
            # MySQL's prepare group begins with XA START where MariaDB's GTID says it.
            self._hold(txn or self._begin(event, session=event.slave_proxy_id))
            return
        if txn is None:
            decided = outcome(sql)
            if decided is not None:
                self._decide(decided, event, position)
                return
            if self._catch_up is not None:
                self._boundary = position  # a statement the THL holds already
                return
        schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        stmt = Statement(sql=sql, default_schema=schema or None, options=session_options(event),
                         error_code=event.error_code, timestamp=event.timestamp * 1_000_000,
                         schema_changes=self._schema_changes(sql, schema or None, position))
        if self._open is None:
            # DDL and autocommitted statements are whole transactions by themselves.
            txn = self._begin(event, session=event.slave_proxy_id)
            self._add(txn, stmt)
            self._commit(position)
        else:
            self._open.session = self._open.session or event.slave_proxy_id
            self._add(self._open, stmt)

    def _schema_changes(self, sql: str, schema: str | None,
                        position: BinlogPosition) -> list[SchemaChange] | None:
        if not is_table_ddl(sql):
            return None
        if self.foreign_keys is not None:
            self.foreign_keys.changed()
        changes = read_schema_changes(sql, schema)
        if changes is None:
            # Published with its text only, as every DDL was before THL schema v2: targets
            # that act on schema-change items cannot follow this one.
            self.ddl_not_understood += 1
            log.warning("DDL at %s not understood, published without schema-change items "
                        "(targets other than MySQL-family ones will not follow it): %.300s",
                        f"{position.file}:{position.pos}", sql)
        return changes

    def _begin(self, event: Any, session: int) -> _Open:
        self._open = _Open(tstamp=event.timestamp * 1_000_000, session=session,
                           server_id=event.packet.server_id, gtid=self._gtid,
                           start=self._boundary,
                           discard=self._catch_up is not None)
        self._gtid = None
        return self._open

    def _hold(self, txn: _Open) -> None:
        """Make ``txn`` an XA prepare: its fragments wait in a spool for the outcome. While
        catching up too, since only its end says whether it is one of those wanted."""
        txn.discard = False
        if txn.spool is None:
            txn.spool = Spool(self.fragment_bytes)

    def _prepare(self, event: XAPrepareEvent, position: BinlogPosition) -> None:
        """The end of a prepare group: park the transaction under its xid."""
        txn, self._open = self._open, None
        self._boundary = position
        if txn is None or txn.spool is None:
            return  # its group began before the start position, or it was read again
        xid = xid_text(event.xid_format_id, event.xid_gtrid, event.xid_bqual)
        if txn.items:
            txn.spool.write(txn.items)
        prepared = Prepared(xid=xid, start=txn.start or position, spool=txn.spool,
                            gtid=txn.gtid, server_id=txn.server_id, session=txn.session,
                            rows=txn.held + txn.rows)
        if event.one_phase:
            # MySQL logs XA COMMIT ... ONE PHASE as a prepare that is also the commit.
            self._publish(prepared, event.packet.server_id, position, self._gtid)
            return
        if self._catch_up is not None and xid not in self._catch_up.wanted:
            prepared.spool.close()  # prepared and decided before the THL tail
            return
        old = self.prepared.pop(xid, None)
        if old is not None:
            old.spool.close()
        self.prepared[xid] = prepared
        log.info("XA transaction %s prepared at %s (%d row(s)); held until its outcome",
                 xid_display(xid), prepared.start.event_id(), prepared.rows)

    def _decide(self, decided: Outcome, event: QueryEvent, position: BinlogPosition) -> None:
        """``XA COMMIT`` publishes the prepared transaction here, ``XA ROLLBACK`` drops it."""
        self._boundary = position
        gtid, self._gtid = self._gtid, None
        prepared = self.prepared.pop(decided.xid, None)
        if prepared is None:
            if self._catch_up is None:
                self.unknown_outcomes += 1
                log.error("XA %s of %s at %s: its prepare precedes this extractor's start "
                          "position, so its rows are not in the THL; provision the tables it "
                          "wrote to (trepctl provision) to bring the targets level",
                          "COMMIT" if decided.commit else "ROLLBACK", xid_display(decided.xid),
                          position.event_id())
            return
        if not decided.commit:
            prepared.spool.close()
            log.info("XA transaction %s rolled back at %s: nothing published",
                     xid_display(decided.xid), position.event_id())
            return
        self._publish(prepared, event.packet.server_id, position, gtid)

    def _publish(self, prepared: Prepared, server_id: int, position: BinlogPosition,
                 gtid: str | None) -> None:
        """A committed XA transaction, fragment by fragment from its spool, at ``position``
        (the commit's: its event id, its GTID, its time): one THL transaction."""
        txn = _Open(tstamp=self._last_time * 1_000_000, session=prepared.session,
                    server_id=server_id, gtid=gtid or prepared.gtid)
        marks = {META_XA_XID: prepared.xid} if prepared.xid else {}
        if prepared.xid and prepared.gtid:
            marks[META_XA_PREPARE_GTID] = prepared.gtid
        held: list[DataItem] | None = None
        for items in prepared.spool.read():
            if held is not None:
                txn.items = held
                self._flush(txn, position, last_frag=False, extra=marks)
            held = items
        if held is not None:
            txn.items = held
            self._flush(txn, position, last_frag=True, extra=marks)

    def _leave_catch_up(self) -> None:
        """Between event groups: stop catching up once the THL tail's position is reached."""
        catch_up = self._catch_up
        if catch_up is None or not self._boundary or \
                not self._boundary.at_or_after(catch_up.until):
            return
        self._catch_up = None
        missing = sorted(set(catch_up.wanted) - set(self.prepared))
        if missing:
            raise ExtractorError(
                f"the THL tail lists XA transaction(s) {', '.join(missing)} as prepared, but "
                f"the binlog from {catch_up.start.event_id()} to {catch_up.until.event_id()} "
                "does not hold their prepare; the extractor will not guess (was the binlog "
                "purged or the source replaced?)")
        log.info("caught up at %s: %d prepared XA transaction(s) held again",
                 catch_up.until.event_id(), len(self.prepared))

    def _rows(self, event: Any, position: BinlogPosition) -> None:
        """A rows event as pymysqlreplication decoded it (see ``row_decoder`` for when)."""
        txn = self._taking(event, position)
        if txn is None:
            return
        shape = shape_of(event.table_map[event.table_id].columns)
        if isinstance(event, WriteRowsEvent):
            action, after, before = RowAction.INSERT, [
                shape.values(r["values"], r.get("none_sources")) for r in event.rows], []
        elif isinstance(event, DeleteRowsEvent):
            action, after, before = RowAction.DELETE, [], [
                shape.values(r["values"], r.get("none_sources")) for r in event.rows]
        else:
            action = RowAction.UPDATE
            after = [shape.values(r["after_values"], r.get("after_none_sources"))
                     for r in event.rows]
            before = [shape.values(r["before_values"], r.get("before_none_sources"))
                      for r in event.rows]
        self._add_rows(txn, event, position, shape, action, after, before,
                       fk_checks=not getattr(event, "flags", 0) & NO_FOREIGN_KEY_CHECKS)

    def _decoded_rows(self, event: DecodedRows, position: BinlogPosition) -> None:
        txn = self._taking(event, position)
        if txn is not None:
            after, before = event.images()
            # The packet is no longer needed: a row of many MiB is not held twice.
            event.data = b""
            self._add_rows(txn, event, position, event.shape, event.action, after, before,
                           fk_checks=event.fk_checks)

    def _taking(self, event: Any, position: BinlogPosition) -> _Open | None:
        """The open transaction a rows event belongs to; None if its table is filtered."""
        if self._open is None:
            raise RuntimeError(f"row event for {event.schema}.{event.table} outside a "
                               f"transaction at {position.event_id()}")
        if self._open.discard:
            return None
        return self._open if self.filters.keeps(event.schema, event.table) else None

    def _add_rows(self, txn: _Open, event: Any, position: BinlogPosition, shape: TableShape,
                  action: RowAction, after: list[list[ThlValue]],
                  before: list[list[ThlValue]], fk_checks: bool = True) -> None:
        # Inserts and updates have an after image per row, deletes a before image.
        nrows = len(after) or len(before)
        items = txn.items
        last = items[-1] if items else None
        if (isinstance(last, RowChange) and last.action is action
                and last.schema == event.schema and last.table == event.table
                and last.column_specs is shape.specs
                and (id(last) in txn.unchecked) is not fk_checks):
            last.column_values.extend(after)
            last.key_values.extend(before)
        else:
            items.append(RowChange(
                action=action, schema=event.schema, table=event.table,
                column_specs=shape.specs if after else [],
                key_specs=shape.specs if before else [],
                column_values=after, key_values=before))
            if not fk_checks:
                txn.unchecked.add(id(items[-1]))
        txn.rows += nrows
        # The binlog event's own size is a fair, free estimate of the THL bytes it adds.
        txn.size += getattr(event, "event_size", 0) or 64 * nrows
        if (txn.rows >= self.fragment_rows
                or txn.size >= self.fragment_bytes):
            if txn.spool is not None:
                txn.spool.write(txn.items)
                txn.held += txn.rows
                txn.items = []
                txn.unchecked.clear()
                txn.rows = txn.size = 0
            else:
                self._flush(txn, position, last_frag=False)

    def _add(self, txn: _Open, stmt: Statement) -> None:
        if txn.discard:
            return
        if self.filters.keeps_item(stmt):
            txn.items.append(stmt)
            txn.size += len(stmt.sql)

    def _commit(self, position: BinlogPosition) -> None:
        txn, self._open = self._open, None
        self._boundary = position
        if txn is None or txn.discard:
            return  # a COMMIT/XID whose BEGIN preceded our start position, or read again
        if txn.spool is not None:
            # An XA group that commits like an ordinary one: publish it here.
            if txn.items:
                txn.spool.write(txn.items)
            self._publish(Prepared(xid="", start=position, spool=txn.spool, gtid=txn.gtid,
                                   server_id=txn.server_id, session=txn.session),
                          txn.server_id, position, txn.gtid)
            return
        if txn.items or txn.fragno > 0:
            self._flush(txn, position, last_frag=True)

    def snapshot(self, items: list[DataItem], position: BinlogPosition, tag: str,
                 marks: str, key: str = META_PROVISION) -> None:
        """Emit provisioned rows (and the DDL that makes their table) as one transaction,
        fragmented like any other, at ``position``: the binlog point the rows were read at.

        ``tag`` makes the event id unique (the binlog position is the one of the transaction
        before); ``marks`` is the metadata ``key`` (``provision``, ``check``: JSON) that
        targets act on.
        """
        if self._open is not None:
            raise RuntimeError("a snapshot can only be emitted between transactions")
        now = int(time.time())
        self._last_time = now
        txn = _Open(tstamp=now * 1_000_000)
        # Large chunks are cut like large transactions; every fragment carries the marks.
        fragments: list[list[DataItem]] = [[i for i in items if isinstance(i, Statement)]]
        rows = 0
        for item in items:
            if not isinstance(item, RowChange):
                continue
            for start in range(0, max(item.row_count, 1), self.fragment_rows):
                part = dataclasses.replace(
                    item, column_values=item.column_values[start:start + self.fragment_rows])
                if fragments[-1] and rows + part.row_count > self.fragment_rows:
                    fragments.append([])
                    rows = 0
                fragments[-1].append(part)
                rows += part.row_count
        event_id = f"{position.event_id()};{tag}"
        for i, data in enumerate(fragments):
            txn.items = data
            self._flush(txn, position, last_frag=i == len(fragments) - 1, event_id=event_id,
                        extra={key: marks})

    def _flush(self, txn: _Open, position: BinlogPosition, *, last_frag: bool,
               event_id: str | None = None, extra: dict[str, str] | None = None) -> None:
        if not txn.items and not last_frag:
            return
        if txn.seqno is None:
            txn.seqno = self.next_seqno
            self.next_seqno += 1
            txn.shard = _shard_of(txn.items)
        if last_frag:
            txn.tstamp = self._last_time * 1_000_000
        shard = txn.shard
        metadata = {"mysql_server_id": str(txn.server_id), "dbms_type": "mysql",
                    "service": self.service, "shard": shard}
        if txn.gtid:
            metadata["gtid"] = txn.gtid
        if last_frag and self.prepared:
            # A restart from this event must read the binlog again from these prepares.
            metadata[META_XA_OPEN] = encode_open(self.prepared)
        metadata.update(extra or {})
        if self.provisioning:
            touched = sorted({(i.schema, i.table) for i in txn.items
                              if isinstance(i, RowChange)} & self.provisioning)
            if touched:
                metadata[META_PROVISIONING] = json.dumps([list(t) for t in touched])
        if self.foreign_keys is not None and txn.items:
            rules = self.foreign_keys.rules_for(txn.items, txn.unchecked)
            if rules is not None:
                metadata[META_FOREIGN_KEYS] = rules.encode()
        event = ThlEvent(
            seqno=txn.seqno, epoch=self.epoch, source_id=self.source_id,
            event_id=event_id or position.event_id(txn.session), shard_id=shard,
            tstamp=txn.tstamp,
            fragno=txn.fragno, last_frag=last_frag, metadata=metadata, data=txn.items,
        )
        if self.chain and event.data:
            # An event the chain empties keeps its seqno: seqnos were assigned already.
            event = self.chain(event) or dataclasses.replace(event, data=[])
        self._emit(event)
        txn.fragno += 1
        txn.items = []
        txn.unchecked.clear()
        txn.rows = txn.size = 0

    def held_xa(self) -> list[Prepared]:
        """The prepared XA transactions that hold replicated changes back: those in other
        schemas (or wholly filtered) are tracked too but are none of the operator's concern."""
        return [p for p in self.prepared.values() if p.replicated]

    def open_xa(self) -> str:
        """What ``trepctl status`` shows: NONE, or how many are prepared and the oldest."""
        held = self.held_xa()
        if not held:
            return "NONE"
        oldest = min(held, key=lambda p: p.seen_at)
        age = time.monotonic() - oldest.seen_at
        return (f"{len(held)} prepared, oldest {xid_display(oldest.xid)} "
                f"({oldest.rows} row(s)) "
                f"open for {age:.0f} s, prepared at {oldest.start.event_id()}")

    def oldest_xa_age(self) -> float:
        """Seconds the oldest prepared XA transaction has been open (0: none)."""
        held = self.held_xa()
        if not held:
            return 0.0
        return time.monotonic() - min(p.seen_at for p in held)


def _shard_of(items: list[DataItem]) -> str:
    """The shard of a fragment: its first schema (Tungsten's default: shard by database)."""
    for item in items:
        if isinstance(item, RowChange):
            return item.schema
        schema = statement_target(item.sql, item.default_schema).schema
        if schema:
            return schema
    return "#UNKNOWN"


def utc_from_micros(micros: int) -> dt.datetime:
    """A THL ``tstamp`` as an aware UTC datetime."""
    return dt.datetime.fromtimestamp(micros / 1_000_000, dt.UTC)
