"""A quiet feed is called stuck only when a committed record past its position was seen at
two looks in a row; a broker that is away or a THL that has nothing more is not a stall."""

from __future__ import annotations

from thl_topics.errors import ThlUnavailable
from thl_topics.stall_watch import StallWatch


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watch(found: list[int | Exception | None]) -> tuple[StallWatch, Clock, list[int]]:
    clock, asked = Clock(), []

    def probe(offset: int) -> int | None:
        asked.append(offset)
        answer = found.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return StallWatch(probe, every_s=10.0, clock=clock), clock, asked


def quiet_for(w: StallWatch, clock: Clock, seconds: float) -> str | None:
    """Quiet polls every 0.2 s for ``seconds``: the first reason given, if any."""
    end = clock.now + seconds
    while clock.now < end:
        reason = w.quiet()
        if reason is not None:
            return reason
        clock.now += 0.2
    return None


def test_not_positioned_is_never_stuck() -> None:
    w, clock, asked = watch([])
    assert quiet_for(w, clock, 60) is None
    assert asked == []


def test_a_record_seen_past_the_position_twice_is_a_stall() -> None:
    w, clock, asked = watch([271, 271])
    w.at(266)
    reason = quiet_for(w, clock, 25)
    assert reason is not None
    assert "offset 271 follows its position 266" in reason
    assert asked == [266, 266]


def test_a_record_delivered_after_the_first_look_is_no_stall() -> None:
    w, clock, asked = watch([271, 300])
    w.at(266)
    assert quiet_for(w, clock, 12) is None  # first look: 271 found
    w.delivered(271)  # ... and the feed's own consumer returned it
    assert quiet_for(w, clock, 12) is None  # the quiet starts again: looks at 272 once
    assert asked == [266, 272]


def test_nothing_past_the_position_is_an_idle_thl() -> None:
    w, clock, asked = watch([None] * 10)
    w.delivered(40)
    assert quiet_for(w, clock, 95) is None
    assert asked and set(asked) == {41}


def test_a_broker_away_forgets_the_first_look() -> None:
    w, clock, _ = watch([271, ThlUnavailable("down"), 271, 271])
    w.at(266)
    assert quiet_for(w, clock, 25) is None  # found, then unreachable: start over
    assert quiet_for(w, clock, 20) is not None  # found twice in a row after that
