"""``python -m stack`` is ``trep-stack``."""

from stack.cli import app

app()
