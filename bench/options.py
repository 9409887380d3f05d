"""The benchmarks' command lines: click, as the project's commands, with the options most of
them share (same names, defaults and help texts in every benchmark that has them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from results import RESULTS

F = TypeVar("F", bound=Callable[..., Any])


def verbatim(doc: str) -> str:
    """``doc`` as click help that keeps its line breaks (each paragraph marked ``\\b``)."""
    return "\n\n".join(f"\b\n{part}" for part in doc.strip().split("\n\n"))


def command(doc: str | None) -> Callable[[Callable[..., Any]], click.Command]:
    """A benchmark's command: its module docstring as the help, kept as written; -h too."""
    return click.command(help=verbatim(doc or ""),
                         context_settings={"help_option_names": ["-h", "--help"]})


def comma_list(text: str) -> list[str]:
    """The non-empty items of a comma-separated option."""
    return [item.strip() for item in text.split(",") if item.strip()]


def rows(default: int, help: str | None = "rows in the THL") -> Callable[[F], F]:
    return click.option("--rows", type=int, default=default, help=help)


def txn_rows(default: int = 10,
             help: str | None = "rows per source transaction (one THL event each)"
             ) -> Callable[[F], F]:
    return click.option("--txn-rows", type=int, default=default, help=help)


def blocks(default: str) -> Callable[[F], F]:
    return click.option("--blocks", default=default,
                        help="block_commit_events values to measure, comma-separated")


def timeout(help: str | None = None) -> Callable[[F], F]:
    return click.option("--timeout", type=float, default=900.0, help=help)


def keep(help: str) -> Callable[[F], F]:
    return click.option("--keep", is_flag=True, help=help)


def out(name: str | None) -> Callable[[F], F]:
    """``--out``: the result file, ``bench/results/<name>`` by default."""
    return click.option("--out", type=click.Path(path_type=Path),
                        default=None if name is None else RESULTS / name)
