"""The console's pages and actions, over services kept in memory (the browser tests over
the real stack are tests/integration/console/)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from starlette.testclient import TestClient

from console.app import create_app
from console.auth import Credentials, hash_password, verify_password
from console.views import LagHistory, svg_points
from replicator.check_report import CheckBusy, Report
from replicator.control import Desired
from replicator.requests import CheckRequest
from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.summary import ThlSummary


class _Nodes:
    def __init__(self) -> None:
        self.desired = Desired()
        self.requests = 0

    def update_desired(self, change: Any) -> Desired:
        change(self.desired)
        self.requests += 1
        return self.desired


class _Services:
    def __init__(self) -> None:
        self.history = LagHistory()
        self.group = _Nodes()
        self.state = "ONLINE"
        self.check: CheckRequest | None = None

    def names(self) -> list[str]:
        return ["shop", "elsewhere"]

    def configured(self) -> list[str]:
        return ["shop"]

    def groups(self, service: str) -> list[str]:
        return ["pg"]

    def overview(self, service: str) -> dict[str, Any]:
        group: dict[str, Any] = {"state": self.state, "appliedLastSeqno": 41,
                                 "appliedLatency": 0.5, "process": "running"}
        if self.state == "OFFLINE:ERROR":
            group.update(pendingErrorSeqno=42, pendingErrorCode="DATA",
                         pendingExceptionMessage="UPDATE of shop.t matched 0 rows <b>")
        return {"service": service, "extractor": {"state": "ONLINE", "appliedLastSeqno": 50,
                                                  "appliedLastEventId": "bin.000003:4242;0",
                                                  "appliedLatency": 0.1, "process": "running"},
                "consumers": {"pg": group}}

    def nodes(self, service: str, component: str) -> Any:
        return self.group

    def thl(self, service: str) -> ThlSummary:
        return ThlSummary(0, 10, first=0, last=42, records=10, size=999,
                          epochs=Counter({0: 43}))

    def events(self, service: str, seqno: int) -> list[ThlEvent]:
        if seqno != 42:
            return []
        specs = [ColumnSpec(1, "id", "INT", primary_key=True), ColumnSpec(2, "v", "BIGINT")]
        return [ThlEvent(seqno=42, epoch=0, source_id="src", event_id="bin.000001:99;3",
                         shard_id="shop", tstamp=0, data=[
                             Statement("UPDATE shop.t SET secret = 'x'"),
                             RowChange(RowAction.INSERT, "shop", "narrow", specs,
                                       column_values=[[7, 1 << 40]])])]

    def checks(self, service: str) -> tuple[CheckRequest | None, Report]:
        return self.check, ({"pg": {"shop.t": {"state": "equal", "rows": 3}}}
                            if self.check else {})

    def start_check(self, service: str) -> CheckRequest:
        if self.check is not None:
            raise CheckBusy("check c1 is running already")
        self.check = CheckRequest(id="c1")
        return self.check


PASSWORD = "correct horse"


@pytest.fixture
def services() -> _Services:
    return _Services()


@pytest.fixture
def client(services: _Services) -> TestClient:
    creds = Credentials({"ops": hash_password(PASSWORD)})
    return TestClient(create_app(services, creds, "secret"), follow_redirects=True)


def _csrf(client: TestClient, path: str = "/services/shop") -> str:
    page = client.get(path).text
    return page.split('name="csrf" value="')[1].split('"')[0]


def _login(client: TestClient) -> None:
    client.post("/login", data={"user": "ops", "password": PASSWORD, "csrf": _csrf(client)})


def test_anyone_reads_the_services_and_their_groups(client: TestClient) -> None:
    page = client.get("/").text
    assert "shop" in page and "pg" in page and "ONLINE" in page
    assert 'href="/services/elsewhere"' in page  # registered, not configured: by name
    assert client.get("/api/services/shop").json()["consumers"]["pg"]["appliedLastSeqno"] == 41
    live = client.get("/fragments/services/shop").text
    assert "41" in live and "binlog position: bin.000003:4242;0" in live
    assert client.get("/services/nope").status_code == 404


def test_an_error_is_shown_escaped(client: TestClient, services: _Services) -> None:
    services.state = "OFFLINE:ERROR"
    page = client.get("/services/shop").text
    assert "stopped at seqno 42 (DATA)" in page and "matched 0 rows &lt;b&gt;" in page


def test_actions_need_a_login_and_the_session_csrf_token(
        client: TestClient, services: _Services) -> None:
    url = "/services/shop/groups/pg/action"
    refused = client.post(url, data={"action": "offline", "csrf": _csrf(client)})
    assert refused.status_code == 403 and services.group.requests == 0
    _login(client)
    assert "logged in as" in client.get("/").text
    assert client.post(url, data={"action": "offline", "csrf": "forged"}).status_code == 403
    done = client.post(url, data={"action": "offline", "csrf": _csrf(client)})
    assert done.status_code == 200 and "offline requested for pg" in done.text
    assert services.group.desired.state == "OFFLINE" and services.group.requests == 1
    client.post(url, data={"action": "skip", "skip": "42,44-45", "csrf": _csrf(client)})
    assert services.group.desired.state == "ONLINE"
    assert services.group.desired.skip_seqnos == [42, 44, 45]
    bad = client.post(url, data={"action": "skip", "skip": "x", "csrf": _csrf(client)})
    assert "not sent: seqnos to skip" in bad.text and services.group.requests == 2


def test_a_login_never_sends_the_browser_to_another_site(client: TestClient) -> None:
    sent = client.post("/login", data={"user": "ops", "password": PASSWORD,
                                        "csrf": _csrf(client), "next": "//evil.example/x"},
                       follow_redirects=False)
    assert sent.headers["location"] == "/"


def test_a_wrong_password_is_refused(client: TestClient) -> None:
    page = client.post("/login", data={"user": "ops", "password": "wrong",
                                       "csrf": _csrf(client)}).text
    assert "login refused" in page and "logged in as" not in page


def test_passwords_are_kept_as_scrypt_hashes() -> None:
    stored = hash_password("a long pass phrase")
    assert stored.startswith("scrypt$") and "a long pass phrase" not in stored
    assert verify_password("a long pass phrase", stored)
    assert not verify_password("a long pass phrasE", stored)
    assert Credentials({}, token="t0k").login("token", "t0k") == "token"
    assert not Credentials({}).any


def test_the_lag_chart_spans_its_samples() -> None:
    assert svg_points([]) == ""
    points = svg_points([(0.0, 0.0), (10.0, 2.0)], width=100, height=10).split()
    assert points == ["0.0,10.0", "100.0,0.0"]


def test_the_thl_page_hides_values_until_a_login(client: TestClient) -> None:
    page = client.get("/services/shop/thl?seqno=42").text
    assert "SEQ# = 42" in page and "narrow" in page and "max seqno" not in page
    assert "1099511627776" not in page and "secret" not in page
    assert "(hidden: log in to see values)" in page
    assert "last seqno</th><td>42" in page and "0 (43)" in page
    _login(client)
    page = client.get("/services/shop/thl?seqno=42").text
    assert "1099511627776" in page and "secret" in page
    assert "holds no seqno 7" in client.get("/services/shop/thl?seqno=7").text


def test_a_check_is_started_from_the_page_and_its_results_shown(
        client: TestClient, services: _Services) -> None:
    url = "/services/shop/check"
    assert client.post(url, data={"csrf": _csrf(client)}).status_code == 403
    _login(client)
    page = client.post(url, data={"csrf": _csrf(client)}).text
    assert "check c1 requested" in page and "shop.t" in page and "equal (3 rows)" in page
    again = client.post(url, data={"csrf": _csrf(client)}).text
    assert "not started: check c1 is running already" in again
