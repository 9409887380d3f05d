"""Consistency checks on the consumer side: compare a target's row range with the source's.

The extractor emits, for each checked row range, an event whose ``check`` metadata holds the
source's row count and digest at that point of the THL (``extractor.check``). The runtime
applies every earlier seqno first (a check event is a block of its own), asks the applier for
the rows it holds in that key range, as THL values (its type map, backwards), digests them
the same way (``thl_topics.checksum``) and has the applier record both results in its
consistency store (Tungsten's ``consistency`` table on SQL targets).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from consumers.applier import Applier
from thl_topics.event import ColumnSpec, ThlEvent, ThlValue
from thl_topics.records import META_CHECK, decode_key, encode_key
from thl_topics.values import from_thl

#: A check event's range is (lo, hi]: None bounds are open.
Key = list[ThlValue]


@dataclass(frozen=True)
class CheckRange:
    """One row range the source checked: where it is, and what the source found."""

    request: str
    schema: str
    table: str
    range: int
    limit: int
    #: Primary key columns, key order (empty: the whole table is one range).
    key: list[str]
    lo: Key | None
    hi: Key | None
    specs: list[ColumnSpec]
    count: int
    digest: str
    method: str

    def contains(self, key: Sequence[ThlValue]) -> bool:
        """Whether a row with this key (THL values, key order) is in the range."""
        typed = [_comparable(self.spec(k), v) for k, v in zip(self.key, key, strict=True)]
        if self.lo is not None and typed <= [_comparable(self.spec(k), v)
                                             for k, v in zip(self.key, self.lo, strict=True)]:
            return False
        return self.hi is None or typed <= [_comparable(self.spec(k), v)
                                            for k, v in zip(self.key, self.hi, strict=True)]

    def spec(self, name: str) -> ColumnSpec:
        return next(c for c in self.specs if c.name == name)


def _comparable(spec: ColumnSpec, value: ThlValue) -> Any:
    return from_thl(spec, value)


@dataclass(frozen=True)
class CheckResult:
    """A range's counts and digests on the source and on this target."""

    request: str
    schema: str
    table: str
    range: int
    limit: int
    lo: Key | None
    hi: Key | None
    source_count: int
    source_digest: str
    target_count: int
    target_digest: str
    method: str
    seqno: int
    checked_at: str

    @property
    def equal(self) -> bool:
        return (self.source_count, self.source_digest) == (self.target_count,
                                                            self.target_digest)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["lo"] = encode_key(self.lo) if self.lo is not None else None
        data["hi"] = encode_key(self.hi) if self.hi is not None else None
        data["equal"] = self.equal
        return data


class CheckingApplier(Applier, Protocol):
    """An applier that can take part in consistency checks (``capabilities.checks``)."""

    def read_range(self, check: CheckRange) -> Iterable[Sequence[ThlValue]]:
        """The rows the target holds in the range, as THL values in ``check.specs`` order,
        read inside the open block (every earlier seqno applied)."""

    def record_check(self, result: CheckResult) -> None:
        """Keep the result in the target's consistency store, inside the open block."""


def check_of(event: ThlEvent) -> CheckRange | None:
    """The range a check event carries (None for any other event)."""
    raw = event.metadata.get(META_CHECK)
    if raw is None:
        return None
    m = json.loads(raw)
    schema, table = m["table"]
    return CheckRange(
        request=str(m["id"]), schema=schema, table=table, range=int(m["range"]),
        limit=int(m["limit"]), key=list(m["key"]),
        lo=decode_key(m["lo"]) if m["lo"] is not None else None,
        hi=decode_key(m["hi"]) if m["hi"] is not None else None,
        specs=[ColumnSpec.from_avro(c) for c in m["columns"]], count=int(m["count"]),
        digest=str(m["digest"]), method=str(m["method"]))


def now_text() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
