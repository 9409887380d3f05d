"""Where a benchmark's JSON result goes: ``bench/results/``, and the console."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from processes import ROOT

RESULTS = ROOT / "bench" / "results"


def write_result(result: dict[str, Any], out: Path, echo: bool = True) -> None:
    """``result`` as indented JSON into ``out`` (its folder made if need be), and on stdout
    unless ``echo`` is off."""
    text = json.dumps(result, indent=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    if echo:
        print(text)
