"""Delta history by seqno: which table version holds a seqno, and rebuilding a table as of one.

Every MERGE the warehouse commits carries ``userMetadata`` naming the seqno range of the
table's changes it applied (``low``..``high``) and the group's generation. A table version
``v`` made by a commit covering ``low..high`` is the table *as of* every seqno from ``high``
up to the next commit's ``low - 1``; for a seqno inside ``low..high - 1`` it already holds
later changes (the block was applied at once), and the version before it is the table as of
``low - 1``. After a replay (``reset`` / ``--from-seqno``: a new generation) the newest
generation that covers a seqno wins.

``rebuild`` makes a table as it was at seqno N from the THL alone: every row change of the
table up to N, staged and MERGEd by the same code as the applier, into a new Delta path.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from consumers.warehouse.config import WarehouseTarget
from consumers.warehouse.merge import DeltaWriter
from consumers.warehouse.naming import TableRef
from consumers.warehouse.staging import BatchStager, StagingArea
from consumers.warehouse.storage import is_delta_table
from thl_topics.event import RowChange, ThlEvent
from thl_topics.reader import ThlReader
from thl_topics.row_changes import ThlGapError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class CommitRange:
    """A Delta commit of the warehouse and the seqnos it covers."""

    version: int
    generation: int
    low: int
    high: int
    operation: str


@dataclass(frozen=True)
class VersionAt:
    """The version of a table that holds a seqno."""

    seqno: int
    commit: CommitRange
    #: True when the version is exactly the table as of ``seqno`` (no later change in it).
    exact: bool

    def describe(self) -> str:
        c = self.commit
        text = (f"seqno {self.seqno}: version {c.version} (generation {c.generation}, "
                f"covers seqnos {c.low}..{c.high})")
        if self.exact:
            return text + ": the table exactly as of this seqno"
        return (text + f": also holds seqnos up to {c.high}, applied in the same block; "
                f"version {c.version - 1} is the table as of seqno {c.low - 1}")


def commit_ranges(spark: SparkSession, ref: TableRef) -> list[CommitRange]:
    """The warehouse's commits to a table, oldest first."""
    # SQL rather than DeltaTable: a Spark Connect session has no DeltaTable here.
    history = spark.sql(f"DESCRIBE HISTORY {ref.sql}")
    found = []
    for row in history.select("version", "operation", "userMetadata").collect():
        try:
            meta = json.loads(row["userMetadata"] or "{}").get("tungsten")
        except ValueError:
            meta = None
        if isinstance(meta, dict) and "low" in meta:
            found.append(CommitRange(int(row["version"]), int(meta.get("generation", 0)),
                                     int(meta["low"]), int(meta["high"]), row["operation"]))
    return sorted(found, key=lambda c: c.version)


def version_for_seqno(commits: list[CommitRange], seqno: int) -> VersionAt | None:
    """The version holding ``seqno`` (None: the table did not exist yet at that seqno)."""
    candidates = [c for c in commits if c.low <= seqno]
    if not candidates:
        return None
    generation = max(c.generation for c in candidates)
    chosen = max((c for c in candidates if c.generation == generation),
                 key=lambda c: c.version)
    return VersionAt(seqno, chosen, exact=chosen.high <= seqno)


def rebuild(spark: SparkSession, kafka: str | Mapping[str, Any], topic: str, schema: str,
            table: str, seqno: int, to: str, cfg: WarehouseTarget | None = None,
            staging: str | None = None, batch_rows: int = 100_000,
            progress: Callable[[int, int], None] | None = None) -> int:
    """Build ``schema.table`` as it was at ``seqno`` into the Delta table at URI ``to``
    (which must not exist), from the THL's first seqno; the row changes applied."""
    target_uri = f"file://{to}" if to.startswith("/") else to
    if is_delta_table(spark, target_uri):
        raise ValueError(f"{target_uri} already holds a Delta table: rebuild into a new path")
    base = cfg or WarehouseTarget(location=tempfile.gettempdir())
    ref = TableRef(f"{schema}.{table}", path=target_uri)
    writer = DeltaWriter(spark, base, resolve=lambda s, t: ref)
    scratch = staging or tempfile.mkdtemp(prefix="tungsten-rebuild-")
    area = StagingArea(scratch if "://" in scratch else f"file://{scratch}", "rebuild",
                       uuid.uuid4().hex[:12])
    app_id = f"tungsten.rebuild.{uuid.uuid4().hex}"
    stager = BatchStager(base.separator, base.quote_all, base.zero_dates)
    applied = 0

    def flush() -> None:
        nonlocal applied
        for i, seg in enumerate(stager.segments):
            area.write(seg, i, spark)
        plans = writer.plan(stager.segments, history=base.keyless == "history")
        for plan in plans:
            writer.read(plan)
        for plan in plans:
            writer.prepare_table(plan)
            meta = {"tungsten": {"rebuild": f"{schema}.{table}", "low": plan.segment.low,
                                 "high": plan.segment.high, "generation": 0}}
            writer.merge(plan, app_id, meta)
            applied += plan.segment.rows
        area.remove([s.uri for s in stager.segments], spark)
        stager.clear()

    with ThlReader(kafka, topic) as reader:
        for event in _table_events(reader, topic, schema, table, seqno):
            stager.add(event)
            if event.last_frag:
                if progress is not None:
                    progress(event.seqno, 0)
                if stager.rows >= batch_rows:
                    flush()
    if stager.segments:
        flush()
    if staging is None:
        shutil.rmtree(scratch, ignore_errors=True)
    return applied


def _table_events(reader: ThlReader, topic: str, schema: str, table: str, seqno: int
                  ) -> Iterator[ThlEvent]:
    """The THL's events from its first seqno up to ``seqno``, each with only the row changes
    of ``schema.table``; ThlGapError where the THL has a gap or ends before ``seqno``."""
    low, high = reader.watermarks()
    expected = None
    for rec in reader.records(low, high):
        if rec.event is None:
            raise ThlGapError(f"{topic}: {rec.error}")
        event = rec.event
        if event.seqno > seqno:
            break
        if expected is not None and event.seqno != expected:
            raise ThlGapError(f"{topic}: seqno {expected} is missing (found "
                              f"{event.seqno}); the THL must be gapless")
        event.data = [i for i in event.data if isinstance(i, RowChange)
                      and (i.schema, i.table) == (schema, table)]
        yield event
        if event.last_frag:
            expected = event.seqno + 1
    if expected is None or expected <= seqno:
        raise ThlGapError(f"{topic}: the THL ends at seqno "
                          f"{(expected or 0) - 1}; seqno {seqno} is not in it")
