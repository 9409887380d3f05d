"""Chunked fragments: keys that sort and parse, values cut and joined exactly, and every
broken sequence of chunks named."""

from __future__ import annotations

import os

import pytest

from thl_topics.chunks import Joiner, chunk_bytes, split
from thl_topics.errors import ThlDecodeError
from thl_topics.records import parse_chunk, parse_key, record_key


def _chunks(seqno: int, fragno: int, value: bytes, size: int) -> list[tuple[bytes, bytes]]:
    pieces = list(split(value, size))
    return [(record_key(seqno, fragno, (i, len(pieces))), p) for i, p in enumerate(pieces)]


def test_chunk_keys_sort_between_their_fragment_and_the_next_and_parse_back() -> None:
    keys = [record_key(7, 0), record_key(7, 1, (0, 3)), record_key(7, 1, (1, 3)),
            record_key(7, 1, (2, 3)), record_key(7, 2), record_key(8, 0, (0, 12))]
    assert sorted(keys) == keys
    assert [parse_key(k) for k in keys] == [(7, 0), (7, 1), (7, 1), (7, 1), (7, 2), (8, 0)]
    assert [parse_chunk(k) for k in keys] == [None, (0, 3), (1, 3), (2, 3), None, (0, 12)]


def test_a_value_cut_into_chunks_is_joined_exactly() -> None:
    value = os.urandom(1_000_003)
    joiner = Joiner("thl.t")
    out = [joiner.add(k, v, offset) for offset, (k, v) in
           enumerate(_chunks(3, 0, value, 100_000), start=40)]
    assert out[:-1] == [None] * 10
    joined = out[-1]
    assert joined is not None and joined.value == value
    assert (joined.first_offset, joined.last_offset) == (40, 50)
    assert not joiner.pending


def test_chunk_size_leaves_room_for_the_record_around_it() -> None:
    assert chunk_bytes(8 << 20) == (8 << 20) - 64 * 1024
    assert chunk_bytes(10_000) == 64 * 1024  # never below a useful size


def test_chunks_that_begin_a_read_belong_to_a_fragment_before_it() -> None:
    chunks = _chunks(3, 0, b"abcdefgh", 3)
    joiner = Joiner("thl.t")
    assert joiner.add(*chunks[1], 11) is None
    assert joiner.add(*chunks[2], 12) is None
    joiner.whole()
    whole = _chunks(4, 0, b"xyz", 2)
    assert joiner.add(*whole[0], 14) is None
    joined = joiner.add(*whole[1], 15)
    assert joined is not None and joined.value == b"xyz"


@pytest.mark.parametrize("order", [
    [0, 2],  # a chunk missing
    [0, 1, 0],  # started again
])
def test_a_broken_sequence_of_chunks_is_an_error_naming_the_offset(order: list[int]) -> None:
    chunks = _chunks(5, 1, b"0123456789", 3)
    joiner = Joiner("thl.t")
    with pytest.raises(ThlDecodeError, match=r"at offset 10\d: .*chunked record broken"):
        for n, i in enumerate(order):
            joiner.add(*chunks[i], 100 + n)


def test_a_fragment_that_ends_before_its_last_chunk_is_an_error() -> None:
    chunks = _chunks(5, 1, b"0123456789", 3)
    joiner = Joiner("thl.t")
    joiner.add(*chunks[0], 1)
    with pytest.raises(ThlDecodeError, match=r"ends after chunk 0 of 4"):
        joiner.whole()


def test_chunks_of_another_fragment_interleaved_are_an_error() -> None:
    a = _chunks(5, 1, b"0123456789", 3)
    b = _chunks(6, 0, b"0123456789", 3)
    joiner = Joiner("thl.t")
    joiner.add(*a[0], 1)
    with pytest.raises(ThlDecodeError, match=r"chunk 1 of 4 of seqno \(6, 0\)"):
        joiner.add(*b[1], 2)
