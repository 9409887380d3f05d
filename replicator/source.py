"""Connections to the source database outside the binlog stream (tracking schema, heartbeats)."""

from __future__ import annotations

import sqlalchemy as sa

from replicator.config import SourceConfig


def source_engine(src: SourceConfig) -> sa.Engine:
    """SQLAlchemy engine of the source, in utf8mb4."""
    url = sa.URL.create("mysql+pymysql", username=src.user,
                        password=src.password.get_secret_value(), host=src.host,
                        port=src.port, query={"charset": "utf8mb4"})
    return sa.create_engine(url, pool_pre_ping=True, hide_parameters=True)
