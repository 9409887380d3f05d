"""The layering ARCHITECTURE.md describes, kept: imports go downwards, no import cycles.

Read from the source with ``ast`` (function-level imports count too: a lazy import that
closes a cycle still ties two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("extractor", "thl_topics", "consumers", "replicator", "trep", "stack", "bench")

#: package -> packages it must never import.
FORBIDDEN = {
    "replicator": {"extractor", "consumers", "trep", "stack", "bench"},
    "thl_topics": {"extractor", "consumers", "replicator", "trep", "stack", "bench"},
    "extractor": {"consumers", "trep", "bench"},
    "consumers": {"extractor", "trep", "bench"},
    "stack": {"extractor", "consumers", "trep", "bench"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_imports(_modules())) == []


def test_imports_go_downwards() -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in _imports(_modules()).items()
        for target in targets
        if target.split(".")[0] in FORBIDDEN.get(name.split(".")[0], set()))
    assert wrong == []
