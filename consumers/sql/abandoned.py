"""Sessions a group dropped with a round trip's answers unread.

Dropping the connection does not stop the server: it still works through what was sent
before it notices, and with overlapped commits that can be the COMMIT of the block before,
leading the abandoned block's statements. Until that session has ended, the position stored
on the target may still move (0 read, 1 a moment later), and a session that resumed from the
early reading would find the position moved at its first lock and stop as if another writer
had been there. So the position is read only once the dropped session is gone.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from consumers.errors import TransientError
from consumers.sql.config import MYSQL_FAMILY

#: Seconds to wait for a dropped session to end before the read is retried later.
WAIT_S = 60.0
#: Seconds between looks at the server's session list.
POLL_S = 0.02

_LISTED = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE pid = %(id)s",
    "mysql": "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %(id)s",
}


def session_id(conn: sa.Connection, dialect: str) -> int | None:
    """The server's id of the session behind ``conn`` (known to the driver since the
    handshake: no round trip); None where it is not known."""
    try:
        raw: Any = conn.connection.dbapi_connection
        if dialect in MYSQL_FAMILY:
            return int(raw.thread_id())
        if dialect == "postgresql":
            return int(raw.info.backend_pid)
    except (AttributeError, TypeError, ValueError, sa_exc.SQLAlchemyError):
        return None
    return None


def wait_gone(engine: sa.Engine, dialect: str, session: int, target: str,
              wait_s: float = WAIT_S) -> None:
    """Until the server lists session ``session`` no more (its transaction then committed
    or rolled back for good); TransientError after ``wait_s``."""
    sql = _LISTED["mysql" if dialect in MYSQL_FAMILY else dialect]
    deadline = time.monotonic() + wait_s
    with engine.connect() as conn:
        while True:
            listed = conn.exec_driver_sql(sql, {"id": session}).scalar_one()
            conn.rollback()  # a fresh snapshot for the next look
            if not listed:
                return
            if time.monotonic() > deadline:
                raise TransientError(
                    f"{target}: session {session}, dropped with a block's answers unread, "
                    f"is still on the server after {wait_s:.0f} s; the position it may "
                    "still commit is read once it has ended")
            time.sleep(POLL_S)
