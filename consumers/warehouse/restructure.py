"""Renamed tables and columns and dropped tables (issue 28), carried out on Delta tables.

The warehouse does not replay DDL statements, so the applier follows these itself, each in a
block of its own, at commit, before the position is written. Every step is harmless when
the block is replayed after a crash:

- **rename table**: a path-based Delta table's folder is moved to the new name's path (one
  ``rename``: atomic on a local file system and HDFS; a copy on object stores). Delta's log
  names its data and deletion-vector files relative to the table's folder, so the table
  works, with its history and transaction ids, at its new path. A catalog table is renamed
  with ``ALTER TABLE ... RENAME TO``. State check: old gone and new there is done.
- **rename column**, ``evolve``: ``ALTER TABLE ... RENAME COLUMN`` (Delta column mapping,
  on in every table the warehouse makes). State check: old gone is done.
- **rename column**, ``lenient``: ``ADD COLUMNS`` (the old column's type; skipped when it is
  there already), then one ``UPDATE ... SET new = old`` with the group's Delta transaction
  id (version = the seqno): a replay finds the column and Delta skips the committed UPDATE.
  The old column stays, as a dropped column does in ``lenient``. A key column (the table's
  ``tungsten.key`` property) is renamed instead, in both modes, and the property follows.
- **drop table** (``evolve``): the folder is moved aside (atomic) and then deleted, so a
  crash half-way leaves no half-deleted table at the path; a catalog table is dropped with
  ``DROP TABLE IF EXISTS``.

Delta's in-process log cache is invalidated for every path moved or removed, and the
writer's schema cache for every table touched.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from consumers.errors import DataError
from consumers.warehouse import storage
from consumers.warehouse.merge import DeltaWriter
from consumers.warehouse.naming import TableRef, quote_name
from thl_topics.schema_change import SchemaChange

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Table property holding the key columns (comma-separated) the table was made with.
KEY_PROPERTY = "tungsten.key"
#: Table property holding the source table (``schema.table``).
SOURCE_PROPERTY = "tungsten.source"
#: Suffix of the folder a dropped table is moved to before it is deleted.
DROPPED_SUFFIX = ".dropped"


class TableStep(StrEnum):
    """What a rename of a table does, from the state of both names on the target."""

    MOVE = "move"
    #: Old gone, new there: renamed already (a replay).
    DONE = "done"
    #: Neither there: the table never reached the target.
    ABSENT = "absent"
    #: Both there (a replay from an earlier seqno remade the old table): left alone.
    BOTH = "both"


class ColumnStep(StrEnum):
    """What a rename of a column does, from the Delta table's columns."""

    RENAME = "rename"
    #: Add the new column (if missing) and fill it from the old one (``lenient``).
    COPY = "copy"
    DONE = "done"
    #: No such table on the target.
    NO_TABLE = "no-table"
    #: Neither column there: nothing to rename.
    ABSENT = "absent"
    #: ``evolve`` with both columns there: a rename cannot be made.
    BOTH = "both"


def table_step(old_exists: bool, new_exists: bool) -> TableStep:
    if old_exists:
        return TableStep.BOTH if new_exists else TableStep.MOVE
    return TableStep.DONE if new_exists else TableStep.ABSENT


def column_step(columns: dict[str, tuple[str, str]] | None, old: str, new: str,
                keep_old: bool, key: list[str]) -> ColumnStep:
    """``columns``: the Delta table's columns (lower-case name -> (name, type)); ``key``:
    its key columns. Names compare without case, as Spark (case-insensitive) does."""
    if columns is None:
        return ColumnStep.NO_TABLE
    has_old, has_new = old.lower() in columns, new.lower() in columns
    if old.lower() == new.lower():  # only the case changes: one column either way
        if not has_old:
            return ColumnStep.ABSENT
        return ColumnStep.DONE if columns[old.lower()][0] == new else ColumnStep.RENAME
    is_key = old.lower() in {k.lower() for k in key}
    if not has_old:
        return ColumnStep.DONE if has_new else ColumnStep.ABSENT
    if keep_old and not (is_key and not has_new):
        return ColumnStep.COPY
    return ColumnStep.BOTH if has_new else ColumnStep.RENAME


def renamed_key(key: list[str], old: str, new: str) -> list[str]:
    """The key columns with ``old`` renamed to ``new``."""
    return [new if k.lower() == old.lower() else k for k in key]


class Restructurer:
    """Carries out renames and drops on one group's Delta tables."""

    def __init__(self, writer: DeltaWriter, target: str) -> None:
        self.writer = writer
        self.target = target

    @property
    def spark(self) -> SparkSession:
        return self.writer.spark

    # -- tables -----------------------------------------------------------------------------

    def rename_table(self, change: SchemaChange, seqno: int) -> None:
        old = self.writer.resolve(change.schema, change.table)
        new = self.writer.resolve(change.new_schema or change.schema,
                                  change.new_name or change.table)
        step = table_step(self.writer.exists(old), self.writer.exists(new))
        if step is TableStep.MOVE:
            started = time.monotonic()
            if old.path is not None and new.path is not None:
                self._move(old.path, new.path, change, seqno)
            else:
                self.spark.sql(f"ALTER TABLE {old.sql} RENAME TO {new.sql}")
            log.info("%s: %s renamed to %s in %.2f s (%s, seqno %d)", self.target, old, new,
                     time.monotonic() - started, change.describe(), seqno)
        elif step is TableStep.BOTH:
            log.warning("%s: %s not renamed to %s (%s, seqno %d): both are there; %s is "
                        "left as it is", self.target, old, new, change.describe(), seqno,
                        new)
        else:
            log.info("%s: %s (seqno %d): %s", self.target, change.describe(), seqno,
                     "renamed already" if step is TableStep.DONE
                     else f"{old} is not there, nothing to rename")
        self.writer.invalidate(old)
        self.writer.invalidate(new)
        if step in (TableStep.MOVE, TableStep.DONE):
            # After the move: a crash between the two is mended by the replay (DONE).
            self._set_property(new, SOURCE_PROPERTY, new.source)

    def _move(self, old: str, new: str, change: SchemaChange, seqno: int) -> None:
        if storage.present(self.spark, new):
            raise DataError(f"{self.target}: {change.describe()} (seqno {seqno}): {new} is "
                            f"there but is not a Delta table; move it away and resume",
                            seqno=seqno)
        if storage.local(old) and storage.local(new):
            target = Path(urlparse(new).path)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(urlparse(old).path, target)
        else:
            fs, src = storage.hadoop(self.spark, old)
            dst = storage.hadoop(self.spark, new)[1]
            fs.mkdirs(dst.getParent())
            if not fs.rename(src, dst):
                raise OSError(f"cannot rename {old} to {new}")
        storage.forget_delta_log(self.spark, old)
        storage.forget_delta_log(self.spark, new)

    def drop_table(self, change: SchemaChange, seqno: int) -> None:
        ref = self.writer.resolve(change.schema, change.table)
        started = time.monotonic()
        if ref.path is not None:
            dropped = self._remove(ref.path)
        else:
            dropped = self.writer.exists(ref)
            self.spark.sql(f"DROP TABLE IF EXISTS {ref.sql}")
        self.writer.invalidate(ref)
        if dropped:
            log.info("%s: %s dropped in %.2f s (%s, seqno %d)", self.target, ref,
                     time.monotonic() - started, change.describe(), seqno)
        else:
            log.info("%s: %s (seqno %d): %s is not there, nothing to drop", self.target,
                     change.describe(), seqno, ref)

    def _remove(self, path: str) -> bool:
        """Move the table's folder aside, then delete it; True when it was there."""
        aside = path.rstrip("/") + DROPPED_SUFFIX
        there = storage.present(self.spark, path)
        if storage.local(path):
            if there:
                shutil.rmtree(urlparse(aside).path, ignore_errors=True)  # an old leftover
                os.rename(urlparse(path).path, urlparse(aside).path)
            shutil.rmtree(urlparse(aside).path, ignore_errors=True)
        else:
            fs, src = storage.hadoop(self.spark, path)
            dst = storage.hadoop(self.spark, aside)[1]
            if there:
                fs.delete(dst, True)  # a leftover of a drop that crashed
                if not fs.rename(src, dst):
                    raise OSError(f"cannot rename {path} to {aside}")
            fs.delete(dst, True)
        storage.forget_delta_log(self.spark, path)
        return there

    # -- columns ----------------------------------------------------------------------------

    def rename_column(self, change: SchemaChange, keep_old: bool, seqno: int, app_id: str,
                      metadata: dict[str, Any]) -> None:
        ref = self.writer.resolve(change.schema, change.table)
        old, new = change.column or "", change.new_name or ""
        columns = self.writer.schema(ref)
        key = self._key(ref) if columns is not None else []
        step = column_step(columns, old, new, keep_old, key)
        started = time.monotonic()
        if step is ColumnStep.RENAME:
            self.spark.sql(f"ALTER TABLE {ref.sql} RENAME COLUMN {quote_name(old)} TO "
                           f"{quote_name(new)}")
        elif step is ColumnStep.COPY and columns is not None \
                and not self._copy(ref, columns, old, new, seqno, app_id, metadata):
            step = ColumnStep.DONE
        if step in (ColumnStep.RENAME, ColumnStep.COPY, ColumnStep.DONE):
            # The new column holds the key's values now. After the rename: a crash between
            # the two is mended by the replay (DONE).
            self._rename_key(ref, key, old, new)
        self.writer.invalidate(ref)
        if step in (ColumnStep.RENAME, ColumnStep.COPY):
            log.info("%s: %s column %s %s %s in %.2f s (%s, seqno %d)", self.target, ref, old,
                     "renamed to" if step is ColumnStep.RENAME else "copied into", new,
                     time.monotonic() - started, change.describe(), seqno)
        elif step is ColumnStep.BOTH:
            log.warning("%s: %s has both columns %s and %s: not renamed (%s, seqno %d)",
                        self.target, ref, old, new, change.describe(), seqno)
        else:
            log.info("%s: %s (seqno %d): %s", self.target, change.describe(), seqno, {
                ColumnStep.DONE: "done already",
                ColumnStep.NO_TABLE: f"{ref} is not there, nothing to rename",
                ColumnStep.ABSENT: f"{ref} has no column {old}, nothing to rename"}[step])

    def _copy(self, ref: TableRef, columns: dict[str, tuple[str, str]], old: str, new: str,
              seqno: int, app_id: str, metadata: dict[str, Any]) -> bool:
        """Add ``new`` (when missing) and fill it from ``old`` in one UPDATE commit carrying
        the group's transaction id: a replay finds the column and Delta skips the UPDATE
        (False: done already)."""
        name, kind = columns[old.lower()]
        if new.lower() not in columns:
            self.spark.sql(f"ALTER TABLE {ref.sql} ADD COLUMNS ({quote_name(new)} "
                           f"{kind.upper()})")
            self.writer.invalidate(ref)
        with self.writer.transaction(app_id, seqno, metadata):
            done = self.spark.sql(f"UPDATE {ref.sql} SET {quote_name(new)} = "
                                  f"{quote_name(name)} WHERE {quote_name(name)} IS NOT NULL"
                                  ).collect()
        if not done:
            log.info("%s: %s column %s already filled from %s (Delta transaction %s v%d)",
                     self.target, ref, new, old, app_id, seqno)
        return bool(done)

    def _properties(self, ref: TableRef) -> dict[str, str]:
        rows = self.spark.sql(f"DESCRIBE DETAIL {ref.sql}").collect()
        return dict(rows[0]["properties"] or {}) if rows else {}

    def _key(self, ref: TableRef) -> list[str]:
        return [k for k in self._properties(ref).get(KEY_PROPERTY, "").split(",") if k]

    def _rename_key(self, ref: TableRef, key: list[str], old: str, new: str) -> None:
        renamed = renamed_key(key, old, new)
        if renamed != key:
            self._set_property(ref, KEY_PROPERTY, ",".join(renamed), check=False)

    def _set_property(self, ref: TableRef, name: str, value: str, check: bool = True
                      ) -> None:
        """Set a table property (idempotent; no commit when it holds ``value`` already)."""
        if check and self._properties(ref).get(name) == value:
            return
        text = value.replace("\\", "\\\\").replace("'", "\\'")
        self.spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ('{name}' = '{text}')")
