"""MkDocs hook: the configuration page gets its reference from the pydantic models at build
time (``trep.config_reference``), so it cannot drift from the code."""

from __future__ import annotations

from typing import Any

from trep.config_reference import reference_markdown

MARK = "<!-- configuration reference -->"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARK in markdown:
        return markdown.replace(MARK, reference_markdown())
    return markdown
