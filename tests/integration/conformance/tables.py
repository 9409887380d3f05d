"""The tables every applier is checked on, in MariaDB's DDL (the source).

Every kind gets its tables from the THL: MariaDB through the replayed DDL, PostgreSQL from
the row images (``create_tables``), the other stores by their nature.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..consumers.tables import TYPES_MYSQL, TYPES_NAMES, TYPES_ROWS


@dataclass(frozen=True)
class Table:
    """A test table: its DDL on the source, columns, key columns."""

    name: str
    mysql: str
    columns: tuple[str, ...]
    #: Primary key columns in key order (empty: the table has no key).
    key: tuple[str, ...]


ITEMS = Table(
    "items",
    "CREATE TABLE {s}.items (id INT PRIMARY KEY, name VARCHAR(40), qty INT, "
    "price DECIMAL(12,2)) DEFAULT CHARSET=utf8mb4",
    ("id", "name", "qty", "price"), ("id",))
COMPOSITE = Table(
    "composite",
    "CREATE TABLE {s}.composite (b VARCHAR(10), a INT, v TEXT, PRIMARY KEY (a, b)) "
    "DEFAULT CHARSET=utf8mb4",
    ("a", "b", "v"), ("a", "b"))
NOPK = Table(
    "nopk",
    "CREATE TABLE {s}.nopk (a INT, b VARCHAR(20) NULL) DEFAULT CHARSET=utf8mb4",
    ("a", "b"), ())
TYPES = Table("types", TYPES_MYSQL, tuple(TYPES_NAMES), ("id",))
HOSTILE = Table(
    'sel`ect "tbl" ü',
    "CREATE TABLE {s}.`sel``ect \"tbl\" ü` (`from` INT PRIMARY KEY, `we\"ird` VARCHAR(20), "
    "`back``tick` INT, `ünï é` TEXT, `order` INT) DEFAULT CHARSET=utf8mb4",
    ("from", 'we"ird', "back`tick", "ünï é", "order"), ("from",))
READY = Table(
    "ready", "CREATE TABLE {s}.ready (n INT AUTO_INCREMENT PRIMARY KEY)", ("n",), ("n",))
BIG = Table(
    "big", "CREATE TABLE {s}.big (id INT PRIMARY KEY, pad VARCHAR(40)) DEFAULT CHARSET=utf8mb4",
    ("id", "pad"), ("id",))
#: A table whose primary key the source changes (``ALTER TABLE ... ADD PRIMARY KEY (code)``):
#: compared by its new key.
REKEYED = Table(
    "rekeyed",
    "CREATE TABLE {s}.rekeyed (id INT NOT NULL PRIMARY KEY, code VARCHAR(10) NOT NULL, "
    "v INT) DEFAULT CHARSET=utf8mb4",
    ("id", "code", "v"), ("code",))
#: A keyless table that gains a primary key, and a keyed one that loses it.
GAINS_KEY = Table("gains_key", "CREATE TABLE {s}.gains_key (a INT NOT NULL, b VARCHAR(10)) "
                  "DEFAULT CHARSET=utf8mb4", ("a", "b"), ("a",))
LOSES_KEY = Table("loses_key", "CREATE TABLE {s}.loses_key (a INT NOT NULL PRIMARY KEY, "
                  "b VARCHAR(10)) DEFAULT CHARSET=utf8mb4", ("a", "b"), ())
#: Generated (virtual and stored) and invisible columns: the THL carries their values.
GENERATED = Table(
    "gen",
    "CREATE TABLE {s}.gen (id INT PRIMARY KEY, a INT, v INT AS (a * 2) VIRTUAL, "
    "st INT AS (a + 1) STORED, h VARCHAR(10) INVISIBLE DEFAULT 'hid', txt VARCHAR(20)) "
    "DEFAULT CHARSET=utf8mb4",
    ("id", "a", "v", "st", "h", "txt"), ("id",))

#: MySQL's zero and partial dates, which no calendar type outside the MySQL family holds.
ZERO_DATES = Table(
    "zero_dates",
    "CREATE TABLE {s}.zero_dates (id INT PRIMARY KEY, d DATE NULL, t DATETIME NULL, "
    "ts TIMESTAMP NULL DEFAULT NULL, note VARCHAR(20)) DEFAULT CHARSET=utf8mb4",
    ("id", "d", "t", "ts", "note"), ("id",))

#: Values of many MiB: a row larger than a Kafka record.
BLOBS = Table(
    "blobs",
    "CREATE TABLE {s}.blobs (id INT PRIMARY KEY, b LONGBLOB, t LONGTEXT) DEFAULT CHARSET=utf8mb4",
    ("id", "b", "t"), ("id",))

#: ITEMS after ``RENAME TABLE items TO goods`` and ``RENAME COLUMN name TO label``.
GOODS = Table("goods", "", ("id", "label", "qty", "price"), ("id",))

#: Foreign keys that cascade, two levels deep, and SET NULL (issue 29): InnoDB changes the
#: child rows, the binlog holds only the parent's change.
ORDERS = Table(
    "orders",
    "CREATE TABLE {s}.orders (id INT PRIMARY KEY, note VARCHAR(20)) ENGINE=InnoDB",
    ("id", "note"), ("id",))
LINES = Table(
    "lines",
    "CREATE TABLE {s}.lines (id INT PRIMARY KEY, order_id INT NOT NULL, qty INT, "
    "CONSTRAINT fk_lines_order FOREIGN KEY (order_id) REFERENCES {s}.orders (id) "
    "ON DELETE CASCADE ON UPDATE CASCADE) ENGINE=InnoDB",
    ("id", "order_id", "qty"), ("id",))
PARTS = Table(
    "parts",
    "CREATE TABLE {s}.parts (id INT PRIMARY KEY, line_id INT, label VARCHAR(20), "
    "CONSTRAINT fk_parts_line FOREIGN KEY (line_id) REFERENCES {s}.lines (id) "
    "ON DELETE CASCADE) ENGINE=InnoDB",
    ("id", "line_id", "label"), ("id",))
NOTES = Table(
    "notes",
    "CREATE TABLE {s}.notes (id INT PRIMARY KEY, order_id INT NULL, body VARCHAR(20), "
    "CONSTRAINT fk_notes_order FOREIGN KEY (order_id) REFERENCES {s}.orders (id) "
    "ON DELETE SET NULL ON UPDATE SET NULL) ENGINE=InnoDB",
    ("id", "order_id", "body"), ("id",))

ALL = (READY, ITEMS, COMPOSITE, NOPK, TYPES, HOSTILE, BIG, GENERATED, BLOBS)

__all__ = ["ALL", "BIG", "BLOBS", "COMPOSITE", "GENERATED", "GOODS", "HOSTILE", "ITEMS", "LINES",
           "NOPK", "NOTES", "ORDERS", "PARTS", "READY", "TYPES", "TYPES_ROWS", "Table"]


def mysql_name(table: Table) -> str:
    """The table's name quoted for MariaDB."""
    return "`" + table.name.replace("`", "``") + "`"


def mysql_columns(table: Table) -> str:
    """The table's columns quoted for MariaDB, comma-separated."""
    return ", ".join("`" + c.replace("`", "``") + "`" for c in table.columns)
