"""How SQL target errors map to the consumer's kinds: transient (retry) or data (stop)."""

from __future__ import annotations

from sqlalchemy import exc as sa_exc

from consumers.errors import DataError, TransientError

#: MySQL errors that say the connection or the server went away, or a retryable conflict.
MYSQL_TRANSIENT = {1040, 1053, 1205, 1213, 2002, 2003, 2006, 2013, 2055}
#: MySQL errors of a DDL replayed after a crash between it and its position write.
DDL_ALREADY_DONE = {1007, 1008, 1050, 1051, 1060, 1061, 1091}
#: MySQL: unknown database.
UNKNOWN_DATABASE = 1049


def mysql_code(exc: sa_exc.DBAPIError) -> int | None:
    """The MySQL error number of a driver error, if it is one."""
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _pg_transient(exc: sa_exc.DBAPIError) -> bool:
    state = getattr(exc.orig, "sqlstate", None)
    # 08: connection exception; 57P: operator intervention (shutdown); 40: rollbacks
    # (serialization failure, deadlock); 53: insufficient resources.
    if not isinstance(state, str):
        return False
    return state[:2] in ("08", "40", "53") or state.startswith("57P")


def first_line(exc: sa_exc.DBAPIError) -> str:
    """The driver's message, first line only."""
    return str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)


def classify(exc: sa_exc.DBAPIError, target: str, doing: str, *, postgres: bool,
             seqno: int = -1) -> TransientError | DataError:
    """Connection trouble is transient; anything the target says about data is not."""
    message = f"{target}: {doing}: {first_line(exc)}"
    code = mysql_code(exc)
    if exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError) \
            or code in MYSQL_TRANSIENT or _pg_transient(exc):
        return TransientError(message, seqno=seqno)
    # An operational error the server did not send (no MySQL number, no SQLSTATE) comes from
    # the client: connection refused, reset, timed out.
    if isinstance(exc, sa_exc.OperationalError) and code is None and (
            not postgres or getattr(exc.orig, "sqlstate", None) is None):
        return TransientError(message, seqno=seqno)
    return DataError(message, seqno=seqno)
