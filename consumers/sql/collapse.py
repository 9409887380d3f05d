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

The classes here are the reference: the applier uses their compiled twins
(``consumers.sql._collapse``), which the unit tests hold equal to them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

Key = tuple[object, ...]
#: A row image: its values in the order of its column specs.
Image = Sequence[object]
#: The primary key's values of an image, in key order.
KeyOf = Callable[[Image], Key]
#: ``TableChanges.outcome``: keys that must exist, keys that must not, keys deleted; images
#: upserted, images inserted.
Outcome = tuple[list[Key], list[Key], list[Key], list[Image], list[Image]]


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
    #: The row's after image at the end of the block, or None: deleted.
    image: Image | None


def picker(index: Sequence[int]) -> KeyOf:
    """An image's values at ``index``, in that order, as a tuple (one C call, or one index,
    a row): its key, or the columns a statement takes."""
    if len(index) == 1:
        at = index[0]
        return lambda image: (image[at],)
    return operator.itemgetter(*index)


class TableChanges:
    """One table's changes in a block, by primary key, in the order keys were first
    touched. Images are the adapted rows themselves (no parameters bound: most of them
    are replaced by a later change of their key, or never leave as anything but text);
    ``KeyOf`` picks an image's key."""

    def __init__(self) -> None:
        self.nets: dict[Key, Net] = {}

    def __len__(self) -> int:
        return len(self.nets)

    def insert(self, after: Image, key_of: KeyOf) -> None:
        if not self.insert_all((after,), key_of):
            key = key_of(after)
            self._net(key)  # an unhashable key value raises NotCollapsed here
            raise Unexplained(f"key {key!r} inserted while its row is there")

    def insert_all(self, images: Sequence[Image], key_of: KeyOf) -> int:
        """``insert`` of each image in turn, up to the first that cannot be collapsed; how
        many were taken. (A row change at a time: a block's most common case, new keys,
        takes no method call a row.)"""
        nets = self.nets
        taken = 0
        for after in images:
            key = key_of(after)
            try:
                net = nets.get(key)
            except TypeError:  # an unhashable key value
                return taken
            if net is None:
                nets[key] = Net(False, after)
            elif net.image is not None:
                return taken  # inserted while its row is there: unexplained
            else:
                net.image = after
            taken += 1
        return taken

    def update(self, after: Image, before: Image, before_key: KeyOf, after_key: KeyOf
               ) -> None:
        key = before_key(before)
        if after_key(after) != key:
            raise KeyMoved(f"key {key!r} moved")
        net = self._net(key)
        if net is None:
            self.nets[key] = Net(True, after)
        elif net.image is None:
            raise Unexplained(f"key {key!r} updated after its delete")
        else:
            net.image = after

    def update_all(self, after: Sequence[Image], before: Sequence[Image], before_key: KeyOf,
                   after_key: KeyOf) -> int:
        """``update`` of each pair of images in turn, up to the first that cannot be
        collapsed; how many were taken."""
        if len(after) != len(before):
            raise ValueError(f"{len(after)} after images, {len(before)} before images")
        taken = 0
        for new, old in zip(after, before, strict=True):
            try:
                self.update(new, old, before_key, after_key)
            except NotCollapsed:
                return taken
            taken += 1
        return taken

    def delete(self, before: Image, key_of: KeyOf) -> None:
        key = key_of(before)
        net = self._net(key)
        if net is None:
            self.nets[key] = Net(True, None)
        elif net.image is None:
            raise Unexplained(f"key {key!r} deleted twice")
        else:
            net.image = None

    def delete_all(self, before: Sequence[Image], key_of: KeyOf) -> int:
        """``delete`` of each image in turn, up to the first that cannot be collapsed; how
        many were taken."""
        taken = 0
        for image in before:
            try:
                self.delete(image, key_of)
            except NotCollapsed:
                return taken
            taken += 1
        return taken

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

    def inserted(self) -> Iterator[Image]:
        """After images of keys that were not there."""
        return (n.image for n in self.nets.values() if not n.existed and n.image is not None)

    def upserted(self) -> Iterator[Image]:
        """After images of keys that were there and stay (their existence checked)."""
        return (n.image for n in self.nets.values() if n.existed and n.image is not None)

    def outcome(self) -> Outcome:
        """``(must_exist, must_not_exist, deleted, upserted, inserted)`` as lists, in one
        pass over the keys."""
        exist: list[Key] = []
        absent: list[Key] = []
        gone: list[Key] = []
        kept: list[Image] = []
        new: list[Image] = []
        for key, net in self.nets.items():
            if net.existed:
                if net.image is None:
                    gone.append(key)
                else:
                    exist.append(key)
                    kept.append(net.image)
            elif net.image is None:
                absent.append(key)
            else:
                new.append(net.image)
        return exist, absent, gone, kept, new

    def _net(self, key: Key) -> Net | None:
        try:
            return self.nets.get(key)
        except TypeError as exc:  # the dict hashes it
            raise NotCollapsed(f"an unhashable key value: {exc}") from exc
