"""Types of the compiled staging-line writer (consumers/warehouse/_stage_lines.pyx)."""

from collections.abc import Callable
from typing import Any

def stage_rows(lines: list[str],
               images: list[tuple[str, list[list[Any]], int, tuple[int, ...],
                                  tuple[int, ...], bool, int]],
               count: int, row: int, tail: str, sep: str, plain: bool,
               last: dict[tuple[Any, ...], int] | None, key_range: tuple[int, int] | None,
               ranged: bool, fallback: Callable[[int, list[Any]], str]
               ) -> tuple[int, int, int, dict[tuple[Any, ...], int] | None,
                          tuple[int, int] | None, bool]: ...
