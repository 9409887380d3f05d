"""Errors of the local stack: one line, naming the service and where to look."""

from __future__ import annotations

from pathlib import Path


class StackError(RuntimeError):
    """A server could not be installed, started or stopped.

    The message is one line: the service, what went wrong, and the log file to read.
    """

    def __init__(self, service: str, message: str, log: Path | None = None) -> None:
        self.service = service
        self.log = log
        text = f"{service}: {message}"
        if log is not None:
            text += f" (see {log})"
        super().__init__(text)
