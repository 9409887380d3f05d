"""A binlog coordinate, and Tungsten's EVENTID form of it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BinlogPosition:
    """A binlog coordinate: the byte offset of the next event in ``file``."""

    file: str
    pos: int

    def event_id(self, session: int = 0) -> str:
        """Tungsten's EVENTID: ``file:offset;session``, offset zero-padded to 16 digits."""
        return f"{self.file}:{self.pos:016d};{session}"

    @classmethod
    def parse(cls, event_id: str) -> BinlogPosition:
        """The position in an EVENTID; ValueError if it is not one."""
        where = event_id.split(";", 1)[0]
        file, _, pos = where.rpartition(":")
        if not file or not pos.isdigit():
            raise ValueError(f"not a binlog EVENTID: {event_id!r}")
        return cls(file, int(pos))

    def order(self) -> tuple[int, str, int]:
        """A sort key in binlog order: the file's sequence number (``mariadb-bin.000012``:
        12, which keeps its order past 999999), then the offset."""
        _, _, suffix = self.file.rpartition(".")
        return (int(suffix) if suffix.isdigit() else -1, self.file, self.pos)

    def at_or_after(self, other: BinlogPosition) -> bool:
        return self.order() >= other.order()
