"""How warehouse failures map to the consumer's kinds: transient (retry) or data (stop).

Spark reports everything as an exception from the JVM; its error class (Spark 4 error
conditions) or Java exception name tells a storage that is away (the staging or table
location unreachable, a cluster gone) from data Spark refuses (text that does not cast, a
malformed staging file, a schema Delta cannot take).
"""

from __future__ import annotations

import re

from consumers.errors import DataError, PositionConflict, TransientError

#: Storage or cluster trouble: retry from the stored position.
_TRANSIENT = re.compile(
    r"java\.io\.IOException|java\.net\.|ConnectException|SocketTimeout|UnknownHost|"
    r"AccessDenied|Permission denied|No space left|Read-only file system|"
    r"SparkContext (?:was shut down|has been shutdown)|Cannot call methods on a stopped|"
    r"Py4JNetworkError|Answer from Java side is empty|Connection refused|"
    r"Not a directory|NotADirectory|FileAlreadyExists|ParentNotDirectory|"
    r"could not be created|No FileSystem for scheme|Task .* failed .* times.*(?:Lost|Executor)|"
    r"Executor.*lost|ExecutorLostFailure|Master removed our application",
    re.IGNORECASE)
#: Another writer committed to a table or the position meanwhile (Delta's optimistic
#: concurrency): the block was not committed by this process.
_CONFLICT = re.compile(r"Concurrent(?:Append|DeleteRead|DeleteDelete|Transaction|Write)"
                       r"Exception|DELTA_CONCURRENT", re.IGNORECASE)
#: Spark cannot run the warehouse as configured (jars missing): an operator's fix.
_SETUP = re.compile(r"Cannot find catalog plugin|ClassNotFoundException|"
                    r"NoClassDefFoundError|DATA_SOURCE_NOT_FOUND")
#: Data Spark refuses even though the storage answered.
_DATA = re.compile(r"CAST_INVALID_INPUT|MALFORMED|NUMERIC_VALUE_OUT_OF_RANGE|"
                   r"DATETIME|CANNOT_PARSE|ARITHMETIC_OVERFLOW|DELTA_|INVALID_", re.IGNORECASE)


def first_line(exc: BaseException) -> str:
    """The useful first line of a Spark exception (its error class and message)."""
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("JVM stacktrace", "at ", "An error occurred")):
            return line[:500]
    return text[:500] or type(exc).__name__


def classify(exc: BaseException, target: str, doing: str, seqno: int = -1
             ) -> TransientError | DataError | PositionConflict:
    """A consumer error for a failure while ``doing`` something on ``target``."""
    text = f"{type(exc).__name__}: {exc}"
    message = f"{target}: {doing}: {first_line(exc)}"
    if isinstance(exc, OSError):
        return TransientError(f"{target}: {doing}: {exc}", seqno=seqno)
    if _CONFLICT.search(text):
        return PositionConflict(f"{message}. Another process wrote the same Delta table "
                                "meanwhile; run one process per group.", seqno=seqno)
    if _SETUP.search(text):
        return DataError(f"{message}. Spark lacks Delta's jars: give spark-submit --jars or "
                         "--packages io.delta:delta-spark_2.13:4.0.0 (or spark.jars)",
                         seqno=seqno)
    if _DATA.search(text.split("JVM stacktrace")[0]):
        return DataError(message, seqno=seqno)
    if _TRANSIENT.search(text):
        return TransientError(message, seqno=seqno)
    return DataError(message, seqno=seqno)
