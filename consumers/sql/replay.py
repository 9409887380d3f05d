"""Statement events replayed on a MySQL-family target (``statements: apply``).

Each statement runs as the source ran it: in the session options it carries (``sql_mode``,
``foreign_key_checks``, character sets, time zone), restored after it, and in its default
schema. Right after a (re)connect a statement may replay DDL that already ran before a
restart (MySQL commits DDL by itself, before the position): an error saying it is done
already is logged and passed.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import DataError
from consumers.sql.context import TargetContext
from consumers.sql.errors import DDL_ALREADY_DONE, UNKNOWN_DATABASE, mysql_code
from replicator import crashpoints
from replicator.sql_names import is_database_statement, is_transactional
from thl_topics.event import Statement, ThlEvent

#: The applier's log: these lines were always the applier's, and are filtered by its name.
log = logging.getLogger("consumers.sql.applier")

#: Source SQL goes to the driver as is: no parameters, so no %-formatting of its text.
_RAW = {"no_parameters": True}
_SESSION_VARIABLES = ("sql_mode", "foreign_key_checks", "unique_checks",
                      "character_set_client", "collation_connection")


class StatementReplay:
    """Replays statement events on the open block's connection."""

    def __init__(self, ctx: TargetContext) -> None:
        self.ctx = ctx
        self._defaults: dict[str, Any] = {}
        #: The first seqno after a (re)connect may replay a DDL that already ran.
        self.replaying = False

    def read_defaults(self) -> None:
        """The session's own values of the variables a statement may set (once)."""
        if not self._defaults:
            row = self.ctx.db.execute(sa.text(
                "SELECT " + ", ".join(f"@@session.{v}" for v in _SESSION_VARIABLES))).one()
            self._defaults = dict(zip(_SESSION_VARIABLES, row, strict=True))

    def replay(self, stmt: Statement, event: ThlEvent) -> None:
        """Run a statement event in its session options (its default schema first)."""
        try:
            self._session(stmt.options)
            # CREATE/DROP DATABASE x is logged with x as its default schema, which the
            # target may not have (yet, or any more).
            if stmt.default_schema and not is_database_statement(stmt.sql):
                self.ctx.db.exec_driver_sql(f"USE {self._quote(stmt.default_schema)}",
                                            execution_options=_RAW)
            self.ctx.db.exec_driver_sql(stmt.sql, execution_options=_RAW)
        except sa_exc.DBAPIError as exc:
            code = mysql_code(exc)
            if self.replaying and code in DDL_ALREADY_DONE:
                log.warning("%s: seqno %d replays a statement that already ran before a "
                            "restart (%s); going on", self.ctx.target, event.seqno, exc.orig)
            elif code == UNKNOWN_DATABASE and stmt.default_schema:
                raise DataError(f"default schema {stmt.default_schema} of seqno {event.seqno} "
                                f"does not exist on {self.ctx.target}") from exc
            else:
                raise self.ctx.classify(exc, f"statement {stmt.sql[:200]!r}") from exc
        finally:
            try:
                self._session(self._defaults, restore=True)
            except sa_exc.DBAPIError as exc:
                log.debug("restoring the session: %s", exc)
        if not is_transactional(stmt.sql):
            # MySQL committed the DDL by itself: the position is not written yet.
            crashpoints.reached("apply-after-ddl")

    def _session(self, options: dict[str, Any], restore: bool = False) -> None:
        sets = []
        for name in _SESSION_VARIABLES:
            value = options.get(name)
            if value is None:
                continue
            text = str(value)
            sets.append(f"@@session.{name} = " + (text if text.isdigit() else
                                                   _sql_string(text)))
        tz = "+00:00" if restore else options.get("time_zone")
        if tz:
            sets.append(f"@@session.time_zone = {_sql_string(str(tz))}")
        if sets:
            self.ctx.db.exec_driver_sql("SET " + ", ".join(sets), execution_options=_RAW)

    def _quote(self, name: str) -> str:
        return str(self.ctx.db.dialect.identifier_preparer.quote_identifier(name))


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
