"""Purging the THL: never past a consumer group unless forced by name; a group whose next
seqno was purged stops saying so; the extractor's retention follows the same rule."""

from __future__ import annotations

import subprocess
import time

import yaml

from thl_topics.reader import ThlReader

from ..harness.processes import bare_env, run_trep
from .conftest import Replication
from .tables import (
    ACCOUNTS_MYSQL,
    ACCOUNTS_NAMES,
    ACCOUNTS_PG,
    NOPK_MYSQL,
    NOPK_PG,
    compare,
    create_tables,
)
from .test_outages import _until
from .workload import MixedWorkload


def _thl(rep: Replication, *args: str, stdin: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    return run_trep("trep.thl", rep.config_path, *args, input=stdin,
                    env=bare_env())


def _first_kept(rep: Replication) -> int:
    with ThlReader(rep.cfg.kafka.bootstrap_servers, rep.cfg.thl_topic) as reader:
        sample = reader.sample(reader.watermarks()[0])
    assert sample is not None
    return sample[1]


def _mirrored(rep: Replication, group: str, seqno: int) -> None:
    """Until ZooKeeper's mirror of the group's position (what purge reads) reaches seqno."""
    from replicator.zk import ServiceNodes
    nodes = ServiceNodes(rep.zk, rep.cfg.zookeeper.root, rep.name)

    def there() -> bool:
        pos = nodes.read_position(f"consumers/{group}")
        return pos is not None and pos.seqno >= seqno
    _until(f"{group} mirrored at {seqno}", there, 30)


def test_purge_stops_at_the_lowest_group_unless_forced(replication: Replication) -> None:
    rep = replication
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=3)
    work.run(30)
    lagging = rep.wait_source_applied()
    _mirrored(rep, "pg", lagging)
    assert rep.trepctl("offline", "-group", "pg").returncode == 0
    rep.wait_state("pg", "OFFLINE:NORMAL")
    work.run(30)
    ahead = rep.wait_source_applied(groups=("mariadb",))
    _mirrored(rep, "mariadb", ahead)

    refused = _thl(rep, "purge", "-seqno", str(ahead), "-y")
    assert refused.returncode == 1
    assert f"consumer group(s) pg (at seqno {lagging}) still need" in refused.stderr
    assert _first_kept(rep) == 0

    done = _thl(rep, "purge", "-seqno", str(lagging), "-y")
    assert done.returncode == 0, done.stderr
    assert f"first seqno kept is {lagging}" in done.stdout
    assert _first_kept(rep) == lagging
    info = _thl(rep, "info")
    assert f"min seqno = {lagging} (first seqno kept)" in info.stdout
    # Still able to come back: its own position is kept.
    assert rep.trepctl("online", "-group", "pg").returncode == 0
    rep.wait_source_applied()
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 5

    assert rep.trepctl("offline", "-group", "pg").returncode == 0
    rep.wait_state("pg", "OFFLINE:NORMAL")
    work.run(20)
    target = rep.wait_source_applied(groups=("mariadb",))
    _mirrored(rep, "mariadb", target)
    asked = _thl(rep, "purge", "-seqno", str(target), stdin="n\n")
    assert asked.returncode != 0 and "Aborted" in asked.stderr  # asks first without -y
    bad = _thl(rep, "purge", "-seqno", str(target), "--force", "nosuch", "-y")
    assert bad.returncode == 2 and "unknown group(s) nosuch" in bad.stderr
    forced = _thl(rep, "purge", "-seqno", str(target), "--force", "pg", "-y")
    assert forced.returncode == 0, forced.stderr
    assert _first_kept(rep) == target

    assert rep.trepctl("online", "-group", "pg").returncode == 0
    status = rep.wait_state("pg", "OFFLINE:ERROR")
    assert status["pendingErrorCode"] == "PURGED"
    message = status["pendingExceptionMessage"]
    assert "was purged from the THL" in message and f"starts at seqno {target}" in message
    assert "re-provision" in message.lower()
    assert rep.status("mariadb")["state"] == "ONLINE"


def test_extractor_retention_never_purges_past_a_group(replication: Replication) -> None:
    rep = replication
    data = yaml.safe_load(rep.config_path.read_text())
    data["extractor"].update(purge_keep_events=5, purge_interval_s=1)
    rep.config_path.write_text(yaml.safe_dump(data))
    rep.cfg = type(rep.cfg).model_validate(data)
    rep.start()
    create_tables(rep, (ACCOUNTS_MYSQL, ACCOUNTS_PG), (NOPK_MYSQL, NOPK_PG))
    work = MixedWorkload(rep.source.port, rep.schema, seed=9)
    work.run(20)
    held = rep.wait_source_applied()
    _mirrored(rep, "pg", held)
    assert rep.trepctl("offline", "-group", "pg").returncode == 0
    rep.wait_state("pg", "OFFLINE:NORMAL")
    work.run(40)
    rep.wait_source_applied(groups=("mariadb",))
    _until("retention purged up to the offline group", lambda: _first_kept(rep) == held, 60)
    time.sleep(3)  # several more retention rounds: none goes past the offline group
    assert _first_kept(rep) == held
    assert rep.trepctl("online", "-group", "pg").returncode == 0
    tail = rep.wait_source_applied()
    for group in ("mariadb", "pg"):
        _mirrored(rep, group, tail)
    _until("retention keeps the last 5", lambda: _first_kept(rep) == tail + 1 - 5, 60)
    assert compare(rep, "accounts", ACCOUNTS_NAMES, "id") > 10
