"""trepctl's seqno lists and the desired-state document."""

from __future__ import annotations

import pytest

from replicator.control import Desired, parse_seqno_ranges


def test_skip_seqno_lists_and_ranges() -> None:
    assert parse_seqno_ranges("5") == [5]
    assert parse_seqno_ranges("7-9,5, 8") == [5, 7, 8, 9]


@pytest.mark.parametrize("bad", ["", "x", "5-", "9-7", "-3", "1-200000"])
def test_bad_seqno_lists_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_seqno_ranges(bad)


def test_desired_ignores_unknown_fields_and_defaults_to_online() -> None:
    assert Desired.from_json(b"") == Desired()
    d = Desired.from_json(b'{"state": "OFFLINE", "request": 3, "future": 1}')
    assert (d.state, d.request, d.skip_seqnos) == ("OFFLINE", 3, [])
