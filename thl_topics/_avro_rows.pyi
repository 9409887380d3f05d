"""Types of the compiled rows writer (thl_topics/_avro_rows.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any

def encode_rows(rows: Sequence[Sequence[Any]], big_long: Callable[[int], bytes]) -> bytes: ...
