"""Which changes a provisioning request makes lenient before its first seqno."""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import ConnectionLoss, NoNodeError

from consumers.provisioning import PendingProvisioning, preceding_tables, with_provisioning
from replicator.requests import ProvisionRequest
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.records import META_PROVISIONING

SPEC = [ColumnSpec(1, "id", "INT", primary_key=True, nullable=False)]


def _event(seqno: int, *tables: tuple[str, str], **metadata: str) -> ThlEvent:
    data: list[Any] = [RowChange(RowAction.DELETE, s, t, [], SPEC, [], [[1]]) for s, t in tables]
    data.append(Statement("CREATE TABLE x.y (id INT)", "x"))
    return ThlEvent(seqno, 0, "src", f"bin.000001:{seqno}", "x", 0, metadata=metadata,
                    data=data)


def test_a_requested_provisioning_covers_every_earlier_change_to_its_tables() -> None:
    req = ProvisionRequest(tables=[["s", "a"]])
    assert preceding_tables(req, _event(5, ("s", "a"), ("s", "b"))) == {("s", "a")}
    everything = ProvisionRequest()
    assert preceding_tables(everything, _event(5, ("s", "a"), ("t", "b"))) == {
        ("s", "a"), ("t", "b")}
    by_schema = ProvisionRequest(schemas=["t"])
    assert preceding_tables(by_schema, _event(5, ("s", "a"), ("t", "b"))) == {("t", "b")}


def test_a_started_provisioning_covers_only_what_comes_before_its_first_seqno() -> None:
    for state in ("running", "done"):
        req = ProvisionRequest(tables=[["s", "a"], ["s", "b"]], resolved=[["s", "a"]],
                               state=state, started_seqno=10)
        assert preceding_tables(req, _event(9, ("s", "a"), ("s", "b"))) == {("s", "a")}
        assert preceding_tables(req, _event(10, ("s", "a"))) == set()
    failed = ProvisionRequest(state="failed", started_seqno=10)
    assert preceding_tables(failed, _event(9, ("s", "a"))) == set()
    assert preceding_tables(None, _event(9, ("s", "a"))) == set()


def test_marks_merge_with_the_extractors() -> None:
    event = _event(3, ("s", "a"), **{META_PROVISIONING: json.dumps([["s", "b"]])})
    marked = with_provisioning(event, {("s", "a")})
    assert json.loads(marked.metadata[META_PROVISIONING]) == [["s", "a"], ["s", "b"]]
    assert META_PROVISIONING in event.metadata and event.metadata is not marked.metadata
    assert with_provisioning(marked, {("s", "a")}) is marked


class _Result:
    def __init__(self, value: Any) -> None:
        self.value = value

    def ready(self) -> bool:
        return True

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Client:
    def __init__(self) -> None:
        self.answers: list[Any] = []
        self.asked = 0

    def get_async(self, path: str) -> _Result:
        assert path == "/tungsten/svc/extractor/provision"
        self.asked += 1
        return _Result(self.answers.pop(0))


def test_the_request_is_read_without_waiting_at_most_once_a_second() -> None:
    client, now = _Client(), [100.0]
    pending = PendingProvisioning(client, "/tungsten/svc/extractor/provision",
                                  clock=lambda: now[0])
    req = ProvisionRequest(tables=[["s", "a"]])
    client.answers = [(req.to_json(), None)]
    first = pending.mark(_event(1, ("s", "a")))
    assert META_PROVISIONING not in first.metadata  # asked now, answered at a later event
    second = pending.mark(_event(2, ("s", "a")))
    assert json.loads(second.metadata[META_PROVISIONING]) == [["s", "a"]]
    assert client.asked == 1
    now[0] += 1.0
    client.answers = [ConnectionLoss()]
    pending.mark(_event(3))
    pending.mark(_event(4))
    assert pending.request is not None  # ZooKeeper away: the last request stands
    now[0] += 1.0
    client.answers = [NoNodeError()]
    pending.mark(_event(5))
    assert META_PROVISIONING not in pending.mark(_event(6, ("s", "a"))).metadata
    assert pending.request is None and client.asked == 3


def test_a_session_reads_the_request_before_its_first_event() -> None:
    client = _Client()
    pending = PendingProvisioning(client, "/tungsten/svc/extractor/provision")
    client.answers = [(ProvisionRequest(tables=[["s", "a"]]).to_json(), None)]
    pending.read_now()
    marked = pending.mark(_event(1, ("s", "a")))
    assert json.loads(marked.metadata[META_PROVISIONING]) == [["s", "a"]]
    assert client.asked == 1
