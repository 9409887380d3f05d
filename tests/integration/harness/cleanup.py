"""Services a test made, cleaned up when it ends, however it ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar


class Cleaned(Protocol):
    def cleanup(self) -> None: ...


S = TypeVar("S", bound=Cleaned)


def cleaned(svc: S) -> Iterator[S]:
    """A fixture's body (``yield from``) that hands over ``svc`` and cleans it up after."""
    try:
        yield svc
    finally:
        svc.cleanup()


def made(make: Callable[..., S]) -> Iterator[Callable[..., S]]:
    """A fixture's body (``yield from``) that hands over a factory; every service it made
    is cleaned up after the test, in the order made."""
    services: list[S] = []

    def tracked(*args: object, **kwargs: object) -> S:
        svc = make(*args, **kwargs)
        services.append(svc)
        return svc

    yield tracked
    for svc in services:
        svc.cleanup()
