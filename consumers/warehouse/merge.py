"""Materializing staged batches into Delta tables with Spark.

For each staging segment (one table, one column layout, one block; the files a block's
flushes wrote for one table and layout are read as one segment: ``staging.coalesced``):

1. **plan**: compare the THL column specs with the Delta table's schema: a new source column
   becomes a new Delta column; a column gone from the source or a changed type stops the
   group (``DataError`` naming table, column and seqno) unless a policy allows it. Every
   segment of a block is planned before anything is written, so a block that cannot be
   applied writes nothing.
2. **read**: Spark reads the CSV with an all-text schema (FAILFAST), casts every column to
   its Delta type (ANSI casts: text that does not parse fails), and keeps the last operation
   per key by (seqno, row) (a collapsed segment holds only that one already:
   ``staging.Segment.collapsed``). The result is materialized before any MERGE, so a cast error
   surfaces before any table of the block is written.
3. **merge**: one MERGE per segment, guarded by ``t._seqno < s._seqno`` (a replay never goes
   backwards) and made idempotent by Delta's transaction ids
   (``spark.databricks.delta.write.txnAppId`` = ``tungsten.<service>.<group>.g<generation>``,
   ``txnVersion`` = the segment's last seqno): a MERGE that already committed is skipped by
   Delta. Each commit's ``userMetadata`` records the seqno range it covers.

Keyless tables in ``history`` mode get an insert-only MERGE on (``_seqno``, ``_row``): every
row change is kept once, whatever the batch boundaries of a replay.

Provisioning: a segment that starts with its table's first provisioned chunk
(``Segment.truncate``) MERGEs with ``WHEN NOT MATCHED BY SOURCE THEN DELETE``: the table is
emptied of every row the segment does not bring, in the same Delta commit (same transaction
id, so a replay of the block skips both together). Row changes marked ``provisioning`` need
nothing more: the MERGE is already an upsert, and a delete of a missing key is a no-op.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from consumers.errors import DataError
from consumers.schema_changes import SchemaChangeMode
from consumers.warehouse.config import WarehouseTarget
from consumers.warehouse.naming import TableRef, quote_name, table_ref
from consumers.warehouse.session import checkpointed
from consumers.warehouse.staging import Segment, coalesced, read_options, staging_schema
from consumers.warehouse.storage import drop_empty_log, is_delta_table
from consumers.warehouse.types import cast_expression, holds, spark_type, widens

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Columns the warehouse adds to every mirrored table, and to history tables.
SEQNO, COMMIT_TIME, OP, ROW = "_seqno", "_committime", "_op", "_row"
MIRROR_META = [(SEQNO, "bigint"), (COMMIT_TIME, "timestamp")]
HISTORY_META = [(OP, "string"), (SEQNO, "bigint"), (ROW, "bigint"), (COMMIT_TIME, "timestamp")]
#: Arbitrary column names (spaces, quotes, unicode) need Delta's column mapping; deletion
#: vectors let a MERGE mark replaced rows instead of rewriting every file it touches
#: (Delta sets the protocol, reader 3 / writer 7, from these).
TABLE_PROPERTIES = {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true"}
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@dataclass
class Plan:
    """What one segment does to its table."""

    segment: Segment
    ref: TableRef
    #: Delta type each staged column is cast into (the existing column's, or its own).
    types: list[str]
    history: bool
    #: Columns to create the table with (None: it exists).
    create: list[tuple[str, str]] | None = None
    #: Columns to add before the MERGE.
    add: list[tuple[str, str]] = field(default_factory=list)
    #: Columns widened on the source, to widen before the MERGE (Delta type widening).
    widen: list[tuple[str, str]] = field(default_factory=list)
    #: Columns dropped on the source, to drop before the MERGE (``dropped_columns: drop``).
    drop: list[str] = field(default_factory=list)
    frame: DataFrame | None = None


def _error(seg: Segment, text: str) -> DataError:
    seqno = seg.seqnos[0] if seg.seqnos else seg.low
    return DataError(f"table {seg.qualified} (seqno {seqno}): {text}", seqno=seqno)


class DeltaWriter:
    """Plans, reads and merges staged segments into Delta tables for one group."""

    def __init__(self, spark: SparkSession, cfg: WarehouseTarget,
                 resolve: Callable[[str, str], TableRef] | None = None,
                 schema_changes: SchemaChangeMode = "lenient") -> None:
        self.spark = spark
        self.cfg = cfg
        #: What a Delta column whose source column is gone becomes.
        self.dropped = cfg.dropped_columns or {"evolve": "drop", "exception": "error"}.get(
            schema_changes, "keep")
        #: A narrowed source type: written into the wider Delta column, or a stop.
        self.narrowed = cfg.type_changes or (
            "error" if schema_changes == "exception" else "keep-wider")
        self._kept_wider: set[tuple[object, str, str]] = set()
        #: (schema, table) -> Delta table; default: the configured path or name template.
        self.resolve = resolve or (lambda schema, table: table_ref(cfg, schema, table))
        #: Known Delta schemas (lower-case name -> (name, type)), by table reference.
        self._schemas: dict[TableRef, dict[str, tuple[str, str]] | None] = {}

    def forget(self) -> None:
        """Drop cached schemas (after a failure: read them again from Delta)."""
        self._schemas.clear()

    def invalidate(self, ref: TableRef) -> None:
        """Drop the cached schema of one table (renamed, dropped or altered)."""
        self._schemas.pop(ref, None)

    # -- schemas ----------------------------------------------------------------------------

    def exists(self, ref: TableRef) -> bool:
        if ref.path is not None:
            return is_delta_table(self.spark, ref.path)
        return bool(self.spark.catalog.tableExists(ref.sql))

    def schema(self, ref: TableRef) -> dict[str, tuple[str, str]] | None:
        """The Delta table's columns (None: no table yet)."""
        if ref not in self._schemas:
            if not self.exists(ref):
                self._schemas[ref] = None
            else:
                fields = self.spark.table(ref.sql).schema.fields
                self._schemas[ref] = {f.name.lower(): (f.name, f.dataType.simpleString())
                                      for f in fields}
        return self._schemas[ref]

    def plan(self, segments: list[Segment], history: bool) -> list[Plan]:
        """Plan every segment in order (schemas evolve segment by segment; a table's run of
        segments in one layout is one plan: ``staging.coalesced``); DataError if one cannot
        be applied. Nothing is written."""
        projected: dict[TableRef, dict[str, tuple[str, str]] | None] = {}
        plans = []
        for seg in coalesced(segments):
            ref = self.resolve(seg.schema, seg.table)
            if ref not in projected:
                known = self.schema(ref)
                projected[ref] = dict(known) if known is not None else None
            current = projected[ref]
            keyless = not seg.key
            if keyless and not history:
                raise _error(seg, "has no primary key (keyless: refuse)")
            incoming = [(c.name, spark_type(c)) for c in seg.columns]
            meta = HISTORY_META if keyless else MIRROR_META
            clash = [n for n, _ in incoming if n.lower() in {m for m, _ in meta}]
            if clash:
                raise _error(seg, f"column(s) {', '.join(clash)} clash with the warehouse's "
                                  "own columns")
            plan = Plan(seg, ref, [t for _, t in incoming], keyless)
            if current is None:
                plan.create = [*incoming, *meta]
                projected[ref] = {n.lower(): (n, t) for n, t in plan.create}
            else:
                self._evolve(plan, current, incoming, meta)
            plans.append(plan)
        return plans

    def _evolve(self, plan: Plan, current: dict[str, tuple[str, str]],
                incoming: list[tuple[str, str]], meta: list[tuple[str, str]]) -> None:
        seg = plan.segment
        wanted = {n.lower() for n, _ in incoming} | {m for m, _ in meta}
        gone = [name for key, (name, _) in current.items() if key not in wanted]
        if gone and self.dropped == "error":
            raise _error(seg, f"column(s) {', '.join(gone)} of the Delta table {plan.ref} "
                              "are gone from the source (dropped or renamed): add them back, "
                              "set schema_changes: lenient (keeps them) or evolve (drops "
                              "them), or skip the seqno")
        if gone and self.dropped == "drop":
            plan.drop.extend(gone)
            for name in gone:
                current.pop(name.lower(), None)
        for i, (name, kind) in enumerate(incoming):
            found = current.get(name.lower())
            if found is None:
                plan.add.append((name, kind))
                current[name.lower()] = (name, kind)
                continue
            existing = found[1]
            if existing == kind:
                continue
            if widens(existing, kind):
                plan.widen.append((found[0], kind))
                current[name.lower()] = (found[0], kind)
                continue
            if self.narrowed == "keep-wider" and holds(existing, kind):
                plan.types[i] = existing
                if (plan.ref, name, kind) not in self._kept_wider:
                    self._kept_wider.add((plan.ref, name, kind))
                    log.warning("column %s of %s narrowed on the source to %s (seqno %d): "
                                "the Delta column stays %s. Values the source rewrote without "
                                "row events (rounded, cut) keep their old form here: "
                                "`trepctl check` finds them", name, plan.ref, kind,
                                seg.seqnos[0] if seg.seqnos else seg.low, existing)
                continue
            raise _error(seg, f"column {name} changed type: the source now sends {kind}, "
                              f"the Delta table {plan.ref} has {existing}"
                              + ("" if holds(existing, kind) else
                                 ", which cannot hold every new value")
                              + "; the warehouse never narrows or rewrites a column: "
                              "migrate the Delta table, set type_changes: keep-wider (when "
                              "it holds the new type), or skip the seqno")
        lacking = [m for m, _ in meta if m not in current]
        if lacking:
            raise _error(seg, f"the Delta table {plan.ref} lacks the warehouse column(s) "
                              f"{', '.join(lacking)}: it was not made by this warehouse, or "
                              "the source table gained or lost its primary key")

    # -- reading ----------------------------------------------------------------------------

    def read(self, plan: Plan) -> DataFrame:
        """The staged segment typed and collapsed to the last operation per key,
        materialized (cast errors surface here, before any MERGE)."""
        seg = plan.segment
        raw = (self.spark.read.schema(staging_schema(seg))
               .options(**read_options(self.cfg.separator, seg.multiline))
               .csv(seg.files))
        exprs = [OP, f"CAST({SEQNO} AS BIGINT) AS {SEQNO}", f"CAST({ROW} AS BIGINT) AS {ROW}",
                 f"CAST(concat({COMMIT_TIME}, 'Z') AS TIMESTAMP) AS {COMMIT_TIME}"]
        exprs += [f"{cast_expression(f'c{i}', t)} AS {quote_name(c.name)}"
                  for i, (c, t) in enumerate(zip(seg.columns, plan.types, strict=True))]
        typed = raw.selectExpr(*exprs)
        if not plan.history and not seg.collapsed:
            # An SQL expression, not pyspark.sql.functions: those build classic (JVM)
            # columns unless the whole process runs in Connect mode.
            keys = ", ".join(quote_name(k) for k in seg.key)
            typed = (typed.selectExpr("*", f"row_number() OVER (PARTITION BY {keys} ORDER BY "
                                           f"{SEQNO} DESC, {ROW} DESC) AS _last")
                     .where("_last = 1").drop("_last"))
        frame = checkpointed(self.spark, typed)
        plan.frame = frame
        return frame

    # -- writing ----------------------------------------------------------------------------

    def prepare_table(self, plan: Plan) -> None:
        """Create the table, or add the new columns (both idempotent)."""
        if plan.create is not None and self._schemas.get(plan.ref) is None:
            if plan.ref.path is not None and drop_empty_log(self.spark, plan.ref.path):
                log.warning("%s: removed a Delta log without a commit (a process killed while "
                            "it created the table); creating it again", plan.ref)
            cols = ", ".join(f"{quote_name(n)} {t.upper()}" for n, t in plan.create)
            props = {**TABLE_PROPERTIES, "tungsten.source": plan.segment.qualified,
                     "tungsten.key": ",".join(plan.segment.key),
                     "tungsten.kind": "history" if plan.history else "mirror"}
            text = ", ".join(f"'{k}' = '{_sql_text(v)}'" for k, v in props.items())
            self.spark.sql(f"CREATE TABLE IF NOT EXISTS {plan.ref.sql} ({cols}) USING delta "
                           f"TBLPROPERTIES ({text})")
            self._schemas.pop(plan.ref, None)
        if plan.add:
            known = self.schema(plan.ref) or {}
            missing = [(n, t) for n, t in plan.add if n.lower() not in known]
            if missing:
                cols = ", ".join(f"{quote_name(n)} {t.upper()}" for n, t in missing)
                self.spark.sql(f"ALTER TABLE {plan.ref.sql} ADD COLUMNS ({cols})")
                log.info("%s: added column(s) %s (seqno %d)", plan.ref,
                         ", ".join(n for n, _ in missing), plan.segment.low)
            self._schemas.pop(plan.ref, None)
        if plan.widen:
            self._widen(plan)
        if plan.drop:
            known = self.schema(plan.ref) or {}
            present = [n for n in plan.drop if n.lower() in known]
            if present:  # a replay finds them gone already
                cols = ", ".join(quote_name(n) for n in present)
                self.spark.sql(f"ALTER TABLE {plan.ref.sql} DROP COLUMNS ({cols})")
                log.info("%s: dropped column(s) %s, dropped on the source (seqno %d)",
                         plan.ref, ", ".join(present), plan.segment.low)
                self._schemas.pop(plan.ref, None)

    def _widen(self, plan: Plan) -> None:
        """Widen the columns whose source type widened (idempotent: a replay finds them
        wide already). Type widening is a Delta table feature, turned on for the table
        the first time (readers need Delta 3.2 or later)."""
        known = self.schema(plan.ref) or {}
        todo = [(n, t) for n, t in plan.widen if known.get(n.lower(), (n, t))[1] != t]
        if not todo:
            return
        self.spark.sql(f"ALTER TABLE {plan.ref.sql} SET TBLPROPERTIES "
                       "('delta.enableTypeWidening' = 'true')")
        for name, kind in todo:
            self.spark.sql(f"ALTER TABLE {plan.ref.sql} ALTER COLUMN {quote_name(name)} "
                           f"TYPE {kind.upper()}")
        log.info("%s: widened column(s) %s (seqno %d)", plan.ref,
                 ", ".join(f"{n} to {t}" for n, t in todo), plan.segment.low)
        self._schemas.pop(plan.ref, None)

    def merge(self, plan: Plan, app_id: str, metadata: dict[str, Any]) -> bool:
        """MERGE one segment; False when Delta skipped it (already committed)."""
        frame = plan.frame if plan.frame is not None else self.read(plan)
        view = f"tungsten_batch_{uuid.uuid4().hex}"
        frame.createOrReplaceTempView(view)
        seg = plan.segment
        cols = [quote_name(c.name) for c in seg.columns]
        try:
            self._txn(app_id, seg.high, metadata)
            if plan.history:
                every = [OP, SEQNO, ROW, COMMIT_TIME, *cols]
                sql = (f"MERGE INTO {plan.ref.sql} t USING {view} s "
                       f"ON t.{SEQNO} = s.{SEQNO} AND t.{ROW} = s.{ROW} "
                       f"AND t.{SEQNO} >= {seg.low} "
                       f"WHEN NOT MATCHED THEN INSERT ({', '.join(every)}) "
                       f"VALUES ({', '.join('s.' + c for c in every)})")
                if seg.truncate:
                    # Every history row before the chunk goes (not matched: t._seqno < low).
                    sql = sql.replace(f"AND t.{SEQNO} >= {seg.low} ", "")
                    sql += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
            else:
                every = [*cols, SEQNO, COMMIT_TIME]
                on = " AND ".join(f"t.{quote_name(k)} = s.{quote_name(k)}" for k in seg.key)
                between = seg.keys_between
                if between is not None and not seg.truncate:
                    # A predicate on the target alone: Delta skips the files whose key
                    # statistics lie outside it instead of scanning the whole table.
                    on += f" AND t.{quote_name(seg.key[0])} BETWEEN {between[0]} AND " \
                          f"{between[1]}"
                sets = ", ".join(f"t.{c} = s.{c}" for c in every)
                sql = (f"MERGE INTO {plan.ref.sql} t USING {view} s ON {on} "
                       f"WHEN MATCHED AND s.{OP} IN ('D', 'UD') AND t.{SEQNO} < s.{SEQNO} "
                       "THEN DELETE "
                       f"WHEN MATCHED AND s.{OP} IN ('I', 'UI') AND t.{SEQNO} < s.{SEQNO} "
                       f"THEN UPDATE SET {sets} "
                       f"WHEN NOT MATCHED AND s.{OP} IN ('I', 'UI') "
                       f"THEN INSERT ({', '.join(every)}) "
                       f"VALUES ({', '.join('s.' + c for c in every)})")
                if seg.truncate:
                    sql += " WHEN NOT MATCHED BY SOURCE THEN DELETE"
            done = self.spark.sql(sql).collect()
        finally:
            self._txn(None, None, None)
            self.spark.catalog.dropTempView(view)
        return bool(done)

    def empty(self, ref: TableRef, app_id: str, version: int,
              metadata: dict[str, Any]) -> bool:
        """Delete every row of a Delta table (a TRUNCATE at the source, at seqno
        ``version``) as one commit with the group's transaction id, so a replay of the
        block skips it; False when there is no table or Delta skipped it."""
        if self.schema(ref) is None:
            return False
        try:
            self._txn(app_id, version, metadata)
            done = self.spark.sql(f"DELETE FROM {ref.sql}").collect()
        finally:
            self._txn(None, None, None)
        return bool(done)

    @contextmanager
    def transaction(self, app_id: str, version: int,
                    metadata: dict[str, Any]) -> Iterator[None]:
        """Delta commits made inside carry the group's transaction id (skipped by Delta when
        this ``app_id`` committed ``version`` already) and ``metadata``."""
        try:
            self._txn(app_id, version, metadata)
            yield
        finally:
            self._txn(None, None, None)

    def _txn(self, app_id: str | None, version: int | None,
             metadata: dict[str, Any] | None) -> None:
        conf = self.spark.conf
        if app_id is None:
            for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA):
                conf.unset(key)
            return
        conf.set(TXN_APP_ID, app_id)
        conf.set(TXN_VERSION, str(version))
        conf.set(USER_METADATA, json.dumps(metadata, separators=(",", ":")))


def _sql_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
