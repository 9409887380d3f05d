"""The console in a real browser against the real stack: it shows a running service, a
group put OFFLINE from the page goes OFFLINE for trepctl, a group stopped by a bad row shows
its error and a skip from the page brings it back ONLINE; an action without a login is
refused."""

from __future__ import annotations

import os
import re
from pathlib import Path

from playwright.sync_api import Browser, Page, expect

from ..consumers.conftest import Replication
from .conftest import PASSWORD, USER, Console


def _shot(page: Page, name: str) -> None:
    """The page as a PNG for the docs, when ``TREP_CONSOLE_SCREENSHOTS`` names a folder."""
    folder = os.environ.get("TREP_CONSOLE_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"console-{name}.png"), full_page=True)


def test_the_console_shows_acts_and_refuses_without_a_login(
        browser: Browser, console: Console, replication: Replication) -> None:
    rep = replication
    rep.start()
    s = rep.schema
    rep.src(f"CREATE TABLE {s}.narrow (id INT PRIMARY KEY, v BIGINT)")
    # Made by hand on PostgreSQL, too narrow for a later value: the pg group will stop.
    rep.pgsql(f'CREATE TABLE "{s}".narrow (id INT PRIMARY KEY, v INTEGER)')
    rep.src(f"INSERT INTO {s}.narrow VALUES (1, 1)")
    rep.wait_source_applied()
    page = browser.new_page()
    page.on("dialog", lambda dialog: dialog.accept())  # the confirmations
    page.goto(f"{console.url}/services/{rep.name}")
    expect(page.locator("#group-pg [data-state]")).to_have_text("ONLINE")
    expect(page.locator("#group-mariadb [data-state]")).to_have_text("ONLINE")
    assert "Log in to act" in page.content()
    _shot(page, "service")

    # Without a login an action is refused, whatever the form says.
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    refused = page.request.post(f"{console.url}/services/{rep.name}/groups/pg/action",
                                form={"action": "offline", "csrf": csrf})
    assert refused.status == 403
    assert rep.status("pg")["state"] == "ONLINE"

    page.fill("input[name=user]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("text=log in")
    expect(page.locator("#login")).to_contain_text(f"logged in as {USER}")

    page.click("#offline-pg")
    rep.wait_state("pg", "OFFLINE:NORMAL")
    assert rep.trepctl("status", "-group", "pg").stdout.count("OFFLINE:NORMAL") == 1
    expect(page.locator("#group-pg [data-state]")).to_have_text("OFFLINE:NORMAL",
                                                                timeout=15_000)
    page.click("#online-pg")
    rep.wait_state("pg", "ONLINE")

    rep.src(f"INSERT INTO {s}.narrow VALUES (2, {1 << 40})")
    stopped = rep.wait_state("pg", "OFFLINE:ERROR")
    bad = stopped["pendingErrorSeqno"]
    error = page.locator("#error-pg")
    expect(error).to_contain_text(f"stopped at seqno {bad}", timeout=15_000)
    expect(error).to_contain_text(re.compile("out of range"))
    _shot(page, "error")
    page.click("#event-link-pg")
    expect(page.locator("#event-0")).to_contain_text(f"SEQ# = {bad}")
    expect(page.locator("#event-0")).to_contain_text(str(1 << 40))  # logged in: values
    anonymous = browser.new_page()
    anonymous.goto(f"{console.url}/services/{rep.name}/thl?seqno={bad}")
    expect(anonymous.locator("#event-0")).to_contain_text("hidden: log in to see values")
    assert str(1 << 40) not in anonymous.content()
    expect(anonymous.locator("#thl-summary")).to_contain_text(str(bad))
    anonymous.close()
    page.goto(f"{console.url}/services/{rep.name}")
    page.fill("#skip-seqnos-pg", str(bad))
    page.click("#skip-pg")
    rep.wait_state("pg", "ONLINE")
    expect(page.locator("#group-pg [data-state]")).to_have_text("ONLINE", timeout=15_000)
    rep.src(f"INSERT INTO {s}.narrow VALUES (3, 3)")
    rep.wait_source_applied()
    assert rep.pgsql(f'SELECT id, v FROM "{s}".narrow ORDER BY id') == [(1, 1), (3, 3)]

    # A check from the page; its results come back on the page.
    page.click("#start-check")
    expect(page.locator("#flash")).to_contain_text("requested")
    for _ in range(120):  # the results are not live: reload until every group reported
        page.reload()
        # The state, not the text: a done request shows a message after it.
        if page.locator("#check-request").get_attribute("data-state") == "done" and \
                "pending" not in page.locator("#check-results").inner_text():
            break
        page.wait_for_timeout(1000)
    else:
        raise AssertionError("the check did not finish: "
                             + page.locator("#check-request").inner_text())
    results = page.locator("#check-results").inner_text()
    assert f"mariadb\t{s}.narrow\tequal" in results, results
    # The skipped row never reached PostgreSQL: the check says so.
    assert f"pg\t{s}.narrow\tdifferent" in results, results
    _shot(page, "check")
    assert "user ops: skip of group pg" in console.log.read_text()
