"""``trep-console``: the operator console in the browser (issue 32)."""
