"""A MariaDB group's process starts without PostgreSQL's driver or SQLAlchemy's PostgreSQL
and Oracle types (a fifth of a second of a group's start-up on this machine), and neither
does the runtime that runs it."""

from __future__ import annotations

import json
import subprocess
import sys

_PG_ONLY = ("psycopg", "sqlalchemy.dialects.postgresql", "sqlalchemy.dialects.oracle",
            "consumers.sql.pgwire")


def _loaded(code: str) -> list[str]:
    probe = (f"import json, sys; {code}; "
             f"print(json.dumps(sorted(m for m in {_PG_ONLY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    return list(json.loads(out))


def test_the_sql_applier_and_runtime_load_no_postgresql_or_oracle_module() -> None:
    assert _loaded("import trep.runner, consumers.sql.applier, consumers.sql.types") == []


def test_a_postgresql_column_type_loads_its_dialect() -> None:
    code = ("from consumers.sql.types import column_type; "
            "from thl_topics.event import ColumnSpec; "
            "column_type(ColumnSpec(1, 'b', 'BLOB'), 'postgresql')")
    assert _loaded(code) == ["sqlalchemy.dialects.postgresql"]
