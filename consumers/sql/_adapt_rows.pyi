"""Types of the compiled rows adapter (consumers/sql/_adapt_rows.pyx)."""

from collections.abc import Callable, Sequence
from typing import TypeVar

Value = TypeVar("Value")

def adapt_rows(plain: tuple[type, ...], nul_free: tuple[int, ...],
               adapted: Callable[[Sequence[Value]], list[object]],
               rows: Sequence[Sequence[Value]]) -> list[list[object]]: ...
