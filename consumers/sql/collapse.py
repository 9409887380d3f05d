"""A block's row changes of one table, collapsed to each primary key's net effect (pure).

Set-based apply (``apply: set-based``) sends a block's changes of a table with a primary key
as a few statements instead of one per row: what each key's changes in the block add up to,
whatever their number. A key's net effect is known from its first and its last change: its
row was there before the block if the first change was an UPDATE or DELETE (``existed``), and
is there after it with the last after image, or not at all (``image`` None). The applier
checks ``existed`` on the target before it writes anything (the row-by-row path's "matched
its row" check, kept), deletes the keys that are gone, inserts the new ones and upserts the
rest.

An UPDATE that moves a row to another key is not collapsed (``KeyMoved``): on a target
that keeps the source's foreign keys, a delete and an insert would cascade where the source
updated. A change the net effects cannot explain (a key inserted twice, a deleted key
updated) is ``Unexplained``: the rows did not come from one consistent source; the changes
go in order, and the target says what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

Params = dict[str, object]
Key = tuple[object, ...]


class NotCollapsed(Exception):
    """This change cannot be collapsed: the table's changes so far go out, it goes in order."""


class KeyMoved(NotCollapsed):
    """An UPDATE changed the primary key."""


class Unexplained(NotCollapsed):
    """A change contradicts the key's earlier changes in the block."""


@dataclass(slots=True)
class Net:
    """One key's net effect in the block."""

    #: Its row was on the target before the block.
    existed: bool
    #: The row after the block (bound parameters, ``v<i>``), or None: deleted.
    image: Params | None


class TableChanges:
    """One table's changes in a block, by primary key, in the order keys were first
    touched. A change names where its key is in its parameters: ``v<i>`` of an after
    image, ``k<i>`` of a before image, in the key's order."""

    def __init__(self) -> None:
        self.nets: dict[Key, Net] = {}

    def __len__(self) -> int:
        return len(self.nets)

    def insert(self, row: Params, after: Sequence[str]) -> None:
        key = _key(row, after)
        net = self.nets.get(key)
        if net is None:
            self.nets[key] = Net(False, row)
        elif net.image is not None:
            raise Unexplained(f"key {key!r} inserted while its row is there")
        else:
            net.image = row

    def update(self, row: Params, before: Sequence[str], after: Sequence[str]) -> None:
        key = _key(row, before)
        if _key(row, after) != key:
            raise KeyMoved(f"key {key!r} moved")
        net = self.nets.get(key)
        if net is None:
            self.nets[key] = Net(True, row)
        elif net.image is None:
            raise Unexplained(f"key {key!r} updated after its delete")
        else:
            net.image = row

    def delete(self, row: Params, before: Sequence[str]) -> None:
        key = _key(row, before)
        net = self.nets.get(key)
        if net is None:
            self.nets[key] = Net(True, None)
        elif net.image is None:
            raise Unexplained(f"key {key!r} deleted twice")
        else:
            net.image = None

    # -- what the target gets -------------------------------------------------------------

    def must_exist(self) -> list[Key]:
        """Keys whose row the block updated and kept: the target must have them."""
        return [k for k, n in self.nets.items() if n.existed and n.image is not None]

    def must_not_exist(self) -> list[Key]:
        """Keys the block inserted and deleted again: the target must not have them (the
        row-by-row path's INSERT would have failed)."""
        return [k for k, n in self.nets.items() if not n.existed and n.image is None]

    def deleted(self) -> list[Key]:
        """Keys whose row was there and is gone."""
        return [k for k, n in self.nets.items() if n.existed and n.image is None]

    def inserted(self) -> Iterator[Params]:
        """After images of keys that were not there."""
        return (n.image for n in self.nets.values() if not n.existed and n.image is not None)

    def upserted(self) -> Iterator[Params]:
        """After images of keys that were there and stay (their existence checked)."""
        return (n.image for n in self.nets.values() if n.existed and n.image is not None)


def _key(row: Params, names: Sequence[str]) -> Key:
    key = (row[names[0]],) if len(names) == 1 else tuple([row[n] for n in names])
    try:
        hash(key)
    except TypeError as exc:
        raise NotCollapsed(f"an unhashable key value: {exc}") from exc
    return key
