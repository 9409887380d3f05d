"""The configuration reference of a service file, made from the pydantic models themselves.

The documentation site's configuration page (``docs/configuration.md``) is this module's
output, put in when the site is built (``docs/hooks/config_reference.py``), so the reference
cannot drift from the code: every setting of every section, its type, its default and the
``#:`` comment above it in the model's source.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from trep.config import ServiceConfig


@dataclass(frozen=True)
class Section:
    """One model where it sits in the service file (``consumers.<group>.target``)."""

    path: str
    model: type[BaseModel]
    title: str


def comments(model: type[BaseModel]) -> dict[str, str]:
    """Each field's ``#:`` comment lines in the model's source, joined."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                above: list[str] = []
                row = node.lineno - 2
                while row >= 0 and lines[row].strip().startswith("#:"):
                    above.insert(0, lines[row].strip()[2:].strip())
                    row -= 1
                if above:
                    found[node.target.id] = " ".join(above)
    return found


def type_text(annotation: Any) -> str:
    """A field's type as a reader of YAML sees it."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_text(a) for a in args if a is not type(None)) + (
            " or null" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {type_text(args[1])}" if len(args) == 2 else "map"
    if annotation is SecretStr:
        return "secret string"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"section [{annotation.__name__}](#{annotation.__name__})"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        try:
            value = field.default_factory()  # type: ignore[call-arg]
        except TypeError:
            return "(computed)"
        if isinstance(value, BaseModel):
            return "(section defaults)"
        if callable(field.default_factory) and getattr(
                field.default_factory, "__name__", "") == "gethostname":
            return "(the host name)"
        return f"`{value!r}`" if value not in ({}, [], ()) else "empty"
    if field.default is PydanticUndefined:
        return "**required**"
    if isinstance(field.default, BaseModel):
        return "(section defaults)"
    if isinstance(field.default, SecretStr):
        return "(hidden)"
    return f"`{field.default!r}`"


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The models a field's type holds (a section, a map or list of sections, a union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models(arg)


def _kind(model: type[BaseModel]) -> str | None:
    """The ``type`` a member of a tagged union is chosen by (targets, filters)."""
    field = model.model_fields.get("type")
    if field is None:
        return None
    if isinstance(field.default, str):
        return field.default
    args = typing.get_args(field.annotation)
    return str(args[0]) if typing.get_origin(field.annotation) is typing.Literal else None


def sections() -> list[Section]:
    """Every model of a service file, in the order a reader meets them."""
    out: list[Section] = []

    def walk(path: str, model: type[BaseModel], title: str) -> None:
        if any(s.model is model for s in out):
            return  # documented once, where a reader meets it first; linked from elsewhere
        out.append(Section(path, model, title))
        for name, field in model.model_fields.items():
            child = f"{path}.{name}" if path else name
            if typing.get_origin(field.annotation) is dict:
                child += ".<name>"
            elif typing.get_origin(field.annotation) is list:
                child += "[]"
            for sub in _models(field.annotation):
                kind = _kind(sub)
                walk(child, sub, f"`{child}`" + (f" with `type: {kind}`" if kind else ""))

    walk("", ServiceConfig, "The service file (top level)")
    return out


def reference_markdown() -> str:
    """The whole reference: one table per section."""
    parts = []
    for section in sections():
        notes = comments(section.model)
        doc = inspect.cleandoc(section.model.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        rows = ["| setting | type | default | what it does |", "|---|---|---|---|"]
        for name, field in section.model.model_fields.items():
            what = (notes.get(name) or field.description or "").replace("|", "\\|")
            rows.append(f"| `{name}` | {type_text(field.annotation)} | "
                        f"{default_text(field)} | {what} |")
        parts.append(f"### {section.title} {{#{section.model.__name__}}}\n\n{doc}\n\n"
                     + "\n".join(rows))
    return "\n\n".join(parts) + "\n"
