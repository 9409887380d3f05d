"""Answers of a fake kazoo client: what ``*_async`` methods return, already complete."""

from __future__ import annotations

from typing import Any


class Done:
    """A completed kazoo async result (a value, or an exception)."""

    def __init__(self, value: Any = None, exception: Exception | None = None) -> None:
        self.value = value
        self.exception = exception

    def successful(self) -> bool:
        return self.exception is None

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self.exception is not None:
            raise self.exception
        return self.value

    def rawlink(self, callback: Any) -> None:
        callback(self)


def answer(call: Any, *args: Any, **kwargs: Any) -> Done:
    """``call(*args, **kwargs)`` as a completed result."""
    try:
        return Done(call(*args, **kwargs))
    except Exception as exc:
        return Done(exception=exc)
