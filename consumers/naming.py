"""One rule for the names a target store gets from source names, for every consumer kind.

A source schema, table or column becomes a store's name in four steps, the same in each kind
(each kind's ``naming.py`` says only what its store accepts):

1. **Override or template.** The target's overrides (``topics``, ``indices`` ...) map
   ``schema.table`` to a template or a name: an exact key wins, then the first shell pattern
   that matches (``Overrides``); otherwise the target's template. Templates are checked when
   the configuration is read (``check_template``).
2. **The store's rule** (``StoreRule.fit``): lower-cased where the store folds case, each
   character it refuses replaced (by ``_``, Debezium's rule for topic names, unless the kind
   escapes injectively), and a name longer than the store's limit cut at a character
   boundary and ended with ``_`` and 8 hex digits of the SHA-256 of the uncut name.
3. **Strict names.** With ``names: strict`` a name the rule would change is a data error
   instead (``UnfitName``, naming the table and what the store refuses).
4. **Collisions.** Replacing characters can make two source tables meet on one name
   (``a b`` and ``a_b``, ``Shop`` and ``shop``). ``NameOwners`` records which source name
   owns each store name, in the target's tracking store where the kind has one, and refuses
   a second owner (``NameCollision``) with the override that resolves it.

Readers (checks, the demo, tests) call the same functions, so they find what the applier
wrote without reading the record.
"""

from __future__ import annotations

import fnmatch
import hashlib
import string
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: ``map`` (the default) applies the store's rule; ``strict`` stops on a name it would change.
NamePolicy = Literal["map", "strict"]

#: Length of the hash that ends a cut name (hex digits), and its separator.
HASH_DIGITS = 8


class UnfitName(ValueError):
    """A store cannot take a name and the policy does not map it; the message says why."""


class NameCollision(UnfitName):
    """Two source names map to one store name."""

    def __init__(self, what: str, name: str, owner: str, other: str, override: str) -> None:
        super().__init__(
            f"{owner} and {other} both map to {what} {name} (the store refuses some of "
            f"their characters, or folds case); give {other} its own name in the target's "
            f"`{override}`")
        self.name, self.owner, self.other = name, owner, other


def check_template(template: str, allowed: Collection[str], what: str,
                   required: Collection[str] = ()) -> str:
    """``template`` if it uses only ``allowed`` placeholders and every ``required`` one
    (ValueError naming the template otherwise): one check for every kind's templates."""
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(f"{what} template {template!r}: {exc}") from exc
    placeholders = ", ".join("{" + f + "}" for f in sorted(allowed))
    if fields - set(allowed) or "" in fields:
        raise ValueError(f"{what} template {template!r} may use only {placeholders}")
    missing = [f for f in required if f not in fields]
    if missing:
        raise ValueError(f"{what} template {template!r} needs "
                         + ", ".join("{" + f + "}" for f in missing))
    return template


class Overrides:
    """Names or templates given per source table: ``{"shop.items": ..., "audit.*": ...}``.

    An exact ``schema.table`` key wins; otherwise the first shell pattern that matches, in
    the order the configuration lists them.
    """

    def __init__(self, entries: Mapping[str, str]) -> None:
        self.entries = dict(entries)

    def match(self, schema: str, table: str) -> str | None:
        name = f"{schema}.{table}"
        found = self.entries.get(name)
        if found is not None:
            return found
        for pattern, value in self.entries.items():
            if fnmatch.fnmatchcase(name, pattern):
                return value
        return None


def _underscore(ch: str) -> str:
    return "_"


@dataclass(frozen=True)
class StoreRule:
    """What one kind of store name accepts, and how a name is made to fit it."""

    #: What the name is, for messages: ``"Kafka topic name"``, ``"PostgreSQL identifier"``.
    what: str
    #: Longest name in UTF-8 bytes.
    max_bytes: int
    #: Whether the store takes a character in this kind of name.
    takes: Callable[[str], bool] = lambda ch: ch != "\x00"
    #: What a refused character becomes (``_`` unless the kind escapes injectively).
    replace: Callable[[str], str] = _underscore
    #: Whether the store folds names to lower case (Elasticsearch indices).
    lower: bool = False
    #: Names the store refuses whatever their characters (``.``, ``..``).
    reserved: frozenset[str] = field(default_factory=frozenset)

    def fit(self, name: str, reserve: int = 0) -> str:
        """``name`` as this store takes it (``reserve`` bytes kept free for a suffix)."""
        out = name.lower() if self.lower else name
        if not all(self.takes(ch) for ch in out):
            out = "".join(ch if self.takes(ch) else self.replace(ch) for ch in out)
        return shorten(out, self.max_bytes - reserve)

    def problem(self, name: str, reserve: int = 0) -> str | None:
        """Why the store cannot take ``name`` as it is, or None if it can."""
        if not name or name in self.reserved:
            return f"{name!r} is not a {self.what}"
        if self.lower and name != name.lower():
            return f"a {self.what} is lower-case"
        bad = sorted({ch for ch in name if not self.takes(ch)})
        if bad:
            return f"a {self.what} cannot contain {' '.join(repr(ch) for ch in bad)}"
        size, limit = len(name.encode()), self.max_bytes - reserve
        if size > limit:
            return f"a {self.what} holds at most {limit} bytes, this one is {size}"
        return None

    def name(self, name: str, policy: NamePolicy, source: str, reserve: int = 0) -> str:
        """The store's name for ``name`` under ``policy`` (``source`` names the table in the
        UnfitName of a strict policy or of a name no rule can make valid)."""
        problem = self.problem(name, reserve)
        if problem is None:
            return name
        if policy == "strict":
            raise UnfitName(f"{source}: {problem} (names: strict); set names: map to map it "
                            f"({self.fit(name, reserve)!r}), or give it a name of its own")
        fitted = self.fit(name, reserve)
        if not fitted or fitted in self.reserved:
            raise UnfitName(f"{source}: {problem}, and no mapping makes {name!r} one; give "
                            "it a name of its own")
        return fitted


def shorten(name: str, max_bytes: int) -> str:
    """``name`` if it fits ``max_bytes`` (UTF-8), else cut at a character boundary and ended
    with ``_`` and the first 8 hex digits of the SHA-256 of the whole name."""
    encoded = name.encode()
    if len(encoded) <= max_bytes:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:HASH_DIGITS]
    cut = encoded[:max_bytes - HASH_DIGITS - 1].decode("utf-8", "ignore")
    return f"{cut}_{digest}"


class NameOwners:
    """Which source name owns each store name: a second owner is refused.

    ``record`` (if given) keeps each new claim in the target's tracking store, and
    ``load`` fills the registry from it, so a collision with a table named in an earlier
    session is found too.
    """

    def __init__(self, what: str, override: str,
                 record: Callable[[str, str], None] | None = None) -> None:
        self.what, self.override = what, override
        self._record = record
        self._owners: dict[str, str] = {}

    def load(self, owners: Mapping[str, str]) -> None:
        """Claims recorded earlier (store name -> source name)."""
        self._owners.update(owners)

    def claim(self, name: str, source: str) -> None:
        """``name`` holds ``source`` from now on (NameCollision if another source owns it)."""
        owner = self._owners.get(name)
        if owner == source:
            return
        if owner is not None:
            raise NameCollision(self.what, name, owner, source, self.override)
        if self._record is not None:
            self._record(name, source)
        self._owners[name] = source

    def owner(self, name: str) -> str | None:
        return self._owners.get(name)

    def release(self, name: str) -> None:
        """Forget a store name (the table or index was dropped)."""
        self._owners.pop(name, None)

    def clear(self) -> None:
        self._owners.clear()
