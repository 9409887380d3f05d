"""Types of the compiled VALUES renderer (consumers/sql/_render_rows.pyx)."""

from collections.abc import Callable, Sequence

def render_images(pieces: tuple[str, ...], rows: Sequence[Sequence[object]],
                  index: tuple[int, ...], special: str,
                  literal: Callable[[object], str],
                  hexed: tuple[int, ...] | None = None) -> list[str]: ...

def render_joined(pieces: tuple[str, ...], rows: Sequence[Sequence[object]],
                  index: tuple[int, ...], special: str,
                  literal: Callable[[object], str], hexed: tuple[int, ...] | None,
                  limit: int, head: str, tail: str) -> list[tuple[str, int]]: ...

def copy_text(rows: Sequence[Sequence[object]], index: tuple[int, ...],
              dump: Callable[[object], bytes | bytearray | memoryview | None],
              utf8: bool) -> bytes: ...
