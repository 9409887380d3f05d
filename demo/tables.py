"""The demo's tables: their DDL on the source (MariaDB), and the columns the comparison reads.

The targets get them from the THL: MariaDB through the replayed DDL, PostgreSQL from the
row images (the SQL applier's ``create_tables``)."""

from __future__ import annotations

from dataclasses import dataclass

SCHEMA = "demo_shop"


@dataclass(frozen=True)
class DemoTable:
    """A demo table: its DDL on MariaDB, and the columns compared."""

    name: str
    mariadb: str
    columns: tuple[str, ...]


TABLES = (
    DemoTable(
        "customers",
        f"CREATE TABLE {SCHEMA}.customers (id INT NOT NULL PRIMARY KEY, "
        "name VARCHAR(80) NOT NULL, email VARCHAR(120) NULL, balance DECIMAL(12,2) NULL, "
        "joined DATETIME(6) NOT NULL, active TINYINT(1) NOT NULL DEFAULT 1, "
        "avatar VARBINARY(32) NULL) DEFAULT CHARSET=utf8mb4",
        # ``email`` is renamed half-way through the workload (``RENAME_EMAIL``).
        ("id", "name", "contact_email", "balance", "joined", "active", "avatar"),
    ),
    DemoTable(
        # No primary key: updates and deletes are matched by the whole before image and touch
        # one row, so exact duplicates (legal here) stay consistent.
        "audit_log",
        f"CREATE TABLE {SCHEMA}.audit_log (customer_id INT NOT NULL, action VARCHAR(16) NOT NULL, "
        "note VARCHAR(200) NULL, amount DECIMAL(14,4) NULL, payload VARBINARY(64) NULL, "
        "logged_at DATETIME(3) NOT NULL, KEY customer_idx (customer_id)) DEFAULT CHARSET=utf8mb4",
        ("customer_id", "action", "note", "amount", "payload", "logged_at"),
    ),
)

#: The schema change the demo makes half-way through its workload: every target follows it
#: (``schema_changes: lenient``, the default: the new column is filled from the old one).
RENAME_EMAIL = f"ALTER TABLE {SCHEMA}.customers RENAME COLUMN email TO contact_email"
