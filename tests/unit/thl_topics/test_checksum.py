"""Canonical values and digests that a source and its targets must compute alike."""

from __future__ import annotations

from thl_topics.checksum import canonical, range_digest
from thl_topics.event import ColumnSpec


def _decimal(precision: int, scale: int) -> ColumnSpec:
    return ColumnSpec(index=1, name="d", type="DECIMAL", length=precision, scale=scale)


def test_the_widest_decimal_is_canonical_without_rounding() -> None:
    # 65 digits: more than the default decimal context's 28 (quantize used to raise).
    value = "-" + "9" * 35 + "." + "9" * 30
    assert canonical(_decimal(65, 30), value) == value


def test_trailing_zeros_of_a_decimal_do_not_make_a_difference() -> None:
    spec = _decimal(65, 30)
    assert canonical(spec, "1.5") == canonical(spec, "1.500000000000000000000000000000")
    assert canonical(_decimal(40, 0), "1" * 40) == "1" * 40


def test_a_one_digit_change_in_a_wide_decimal_changes_the_digest() -> None:
    spec = _decimal(65, 30)
    low = "1" * 35 + "." + "0" * 29 + "1"
    high = "1" * 35 + "." + "0" * 29 + "2"
    assert range_digest([spec], [[low]]) != range_digest([spec], [[high]])
