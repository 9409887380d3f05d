"""EVENTIDs: Tungsten's file:offset;session form, both ways."""

from __future__ import annotations

import pytest

from extractor.binlog_position import BinlogPosition


def test_event_id_layout() -> None:
    pos = BinlogPosition("mariadb-bin.000010", 439)
    assert pos.event_id(7) == "mariadb-bin.000010:0000000000000439;7"
    assert BinlogPosition.parse(pos.event_id(7)) == pos


@pytest.mark.parametrize("bad", ["", "mariadb-bin.000010", "file:abc;0", ":12;0"])
def test_bad_event_ids_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a binlog EVENTID"):
        BinlogPosition.parse(bad)
