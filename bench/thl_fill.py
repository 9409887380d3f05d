"""A benchmark's THL: the workload written on the source and extracted by the extractor
alone, before any consumer group is timed.

The apply benchmarks time their groups on a THL that is already complete, so that the
extractor's work and the source's are not in the figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeAlias

import pymysql
from processes import start_runner, stop
from service import connect_mysql

from thl_topics.errors import ThlTopicMissing
from thl_topics.reader import ThlReader
from trep.config import ServiceConfig

#: Writes the workload on a source connection, committing its transactions.
Workload: TypeAlias = "Callable[[pymysql.connections.Connection[Any]], None]"


def thl_tail(cfg: ServiceConfig) -> tuple[int, str | None]:
    """Seqno (-1: none yet) and source GTID of the last event in the THL."""
    try:
        with ThlReader(cfg.kafka.client(), cfg.thl_topic) as reader:
            tail = reader.tail()
    except ThlTopicMissing:
        return -1, None
    if tail is None:
        return -1, None
    return tail.seqno, None if tail.event is None else tail.event.metadata.get("gtid")


def gtid_sequence(gtid: str) -> tuple[int, int]:
    """(domain, sequence) of a MariaDB GTID ``domain-server-sequence``."""
    domain, _, seq = gtid.split("-")
    return int(domain), int(seq)


def fill_thl(cfg: ServiceConfig, config: Path, log: Path, source_port: int,
             workload: Workload) -> tuple[int, float]:
    """Run the extractor alone while ``workload`` writes on the source, until the THL holds
    its last transaction; (THL tail seqno, seconds)."""
    started = time.monotonic()
    proc = start_runner(config, log, "--no-consumers")
    try:
        conn = connect_mysql(source_port)
        workload(conn)
        with conn.cursor() as cur:
            cur.execute("SELECT @@last_gtid")
            found = cur.fetchone()
        conn.close()
        if found is None or not found[0]:
            raise SystemExit("the source reports no GTID for the workload")
        # Wait for the last transaction's GTID, not a seqno: the THL also holds statements
        # the extractor itself caused (CREATE SCHEMA IF NOT EXISTS of its tracking schema).
        domain, sequence = gtid_sequence(str(found[0]))
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the extractor exited; see {log}")
            last, gtid = thl_tail(cfg)
            if gtid is not None and gtid_sequence(gtid)[0] == domain and \
                    gtid_sequence(gtid)[1] >= sequence:
                return last, time.monotonic() - started
            time.sleep(0.5)
    finally:
        stop(proc)
