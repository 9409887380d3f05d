"""Types of the compiled row-image reader (extractor/_row_images.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any

class RowReader:
    def __init__(self, kinds: Sequence[int], sizes: Sequence[int], encodings: Sequence[str],
                 fallbacks: Sequence[Callable[[bytes, int], tuple[Any, int]]]) -> None: ...
    def rows(self, data: bytes, pos: int, end: int) -> list[list[Any]]: ...
