"""trepctl starts for every status or online an operator types: it must not pay for the
client libraries of targets the command never touches."""

from __future__ import annotations

import subprocess
import sys


def test_trepctl_imports_neither_pymongo_nor_rich_until_a_command_needs_them() -> None:
    probe = ("import sys, trep.trepctl; "
             "print(sorted(m for m in ('pymongo', 'rich.progress') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]", out
