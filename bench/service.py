"""A benchmark's throw-away service on the local stack: its configuration file, where its
extractor starts, and its removal afterwards.

Each run makes a service of its own (a random name): its THL topic, tracking schema,
consumer groups and znodes are new, and go again once the figures are in, whatever the
benchmark measured.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pymysql
import sqlalchemy as sa
import yaml
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoNodeError

from replicator.tracking import CommitSeqno, CommitSeqnoTable
from replicator.zk import connect
from stack.settings import port as stack_port
from trep.config import ServiceConfig

HOST = "127.0.0.1"


def connect_mysql(port: int, autocommit: bool = False, **settings: Any
                  ) -> pymysql.connections.Connection[Any]:
    """A root connection to one of the stack's MariaDB servers."""
    return pymysql.connect(host=HOST, port=port, user="root", password="", charset="utf8mb4",
                           autocommit=autocommit, **settings)


def stack_servers(source: str = "mariadb-source") -> dict[str, Any]:
    """The ``kafka``, ``zookeeper`` and ``source`` sections for the local stack's servers
    (``source``: the stack's name of the MariaDB server to extract from)."""
    return {"kafka": {"bootstrap_servers": f"{HOST}:{stack_port('kafka')}"},
            "zookeeper": {"hosts": f"{HOST}:{stack_port('zookeeper')}"},
            "source": {"host": HOST, "port": stack_port(source), "user": "root",
                       "password": ""}}


def extractor(service: str, first_id: int, ids: int, schemas: Iterable[str],
              source_id: str) -> dict[str, Any]:
    """The ``extractor`` section: the benchmark's schemas only, and a replication client id
    of its own (the source drops the older of two clients that announce the same one)."""
    return {"server_id": first_id + int(service[-4:], 16) % ids, "source_id": source_id,
            "filters": {"replicate": [f"{schema}.*" for schema in schemas]}}


def write_config(path: Path, service: str, sections: dict[str, Any]) -> Path:
    """The service's YAML configuration at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"service": service, **sections}))
    return path


def binlog_position(conn: pymysql.connections.Connection[Any]) -> tuple[str, int]:
    """The source's binary log file and position now."""
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        status = cur.fetchone()
    if status is None:
        raise SystemExit("the source has no binary log")
    return str(status[0]), int(status[1])


def seed_start(source_port: int, tracking_schema: str, source_id: str,
               ddl: Iterable[str] = (), at: tuple[str, int] | None = None) -> None:
    """Run ``ddl`` on the source, then make the extractor start right after it (or at
    ``at``): the THL holds the workload only.

    The tracking schema is made before the position is taken: the extractor keeps
    statements on its own tracking schema (its filter lets ``heartbeat`` through), and a
    replayed CREATE TABLE of it fails on targets that already have it.
    """
    engine = sa.create_engine(f"mysql+pymysql://root@{HOST}:{source_port}/")
    tracking = CommitSeqnoTable(tracking_schema)
    try:
        with engine.begin() as conn:
            for statement in ddl:
                conn.execute(sa.text(statement))
            tracking.create(conn)
            if at is None:
                status = conn.execute(sa.text("SHOW MASTER STATUS")).first()
                if status is None:
                    raise SystemExit("the source has no binary log")
                at = (str(status[0]), int(status[1]))
            tracking.write(conn, CommitSeqno(seqno=-1, epoch=0,
                                             eventid=f"{at[0]}:{at[1]:016d};0",
                                             source_id=source_id))
    finally:
        engine.dispose()


def drop_schemas(port: int, schemas: Iterable[str]) -> None:
    """``DROP DATABASE IF EXISTS`` of each schema on one MariaDB server."""
    conn = connect_mysql(port, autocommit=True)
    try:
        with conn.cursor() as cur:
            for schema in schemas:
                cur.execute(f"DROP DATABASE IF EXISTS {schema}")
    finally:
        conn.close()


def remove_service(cfg: ServiceConfig, config: Path) -> None:
    """Remove the service's THL topic, consumer groups, znodes and configuration file.

    The admin client takes the service's own Kafka settings, security included: a stack
    whose Kafka wants SASL or TLS refuses a client with the bootstrap servers alone.
    """
    admin = AdminClient(cfg.kafka.client())
    groups = [cfg.group_id(name) for name in cfg.consumers]
    futures = admin.delete_topics([cfg.thl_topic], operation_timeout=30)
    if groups:  # the admin client refuses an empty list
        futures.update(admin.delete_consumer_groups(groups, request_timeout=30))
    for name, future in futures.items():
        try:
            future.result(30)
        except Exception as exc:  # a group that never committed does not exist: fine
            print(f"cleanup: {name}: {exc}", file=sys.stderr)
    zk = connect(cfg.zookeeper.hosts, cfg.zookeeper.timeout_s)
    try:
        zk.delete(f"{cfg.zookeeper.root.rstrip('/')}/{cfg.service}", recursive=True)
    except NoNodeError:
        pass
    finally:
        zk.stop()
        zk.close()
    config.unlink(missing_ok=True)
