"""The demo on a SQL target: MariaDB gets the demo tables through the replayed DDL,
PostgreSQL from the THL's row images (``create_tables``): its rebuild only drops them."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from consumers.sql.config import MYSQL_FAMILY, SqlTarget
from demo.compare import Digest, digest
from demo.tables import SCHEMA, DemoTable
from trep.config import ServiceConfig


class SqlDemoTarget:
    """A SQL consumer group's target."""

    def __init__(self, cfg: ServiceConfig, group: str, tables: Sequence[DemoTable]) -> None:
        target = cfg.consumers[group].target
        if not isinstance(target, SqlTarget):
            raise TypeError(f"{group} is not a SQL group")
        self.target = target
        self.tables = tables

    def _engine(self) -> sa.Engine:
        return sa.create_engine(self.target.engine_url(), isolation_level="AUTOCOMMIT")

    def rebuild(self) -> None:
        if self.target.dialect in MYSQL_FAMILY:
            return  # the replayed DROP/CREATE TABLEs rebuild them
        # The applier makes the schema and the tables again from the first row changes.
        engine = self._engine()
        try:
            with engine.connect() as conn:
                conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        finally:
            engine.dispose()

    def digests(self) -> dict[str, Digest]:
        engine = self._engine()
        try:
            with engine.connect() as conn:
                return {t.name: digest(conn.execute(sa.text(
                    f"SELECT {', '.join(t.columns)} FROM {SCHEMA}.{t.name}")).all())
                        for t in self.tables}
        finally:
            engine.dispose()
