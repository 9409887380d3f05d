"""Command-line tools: thl, trepctl."""
