"""Avro single-object encoding of THL events (marker, CRC-64-AVRO fingerprint, body).

Every schema version in ``schemas/avro/`` is known by its fingerprint, so a record written
with an older schema still reads. It is read with its own writer schema, and the Python model
fills the defaults of fields added later: fastavro's union resolution would otherwise promote
a ``bytes`` value of the column-value union to ``string`` (the first compatible branch).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from thl_topics import fast_encoder
from thl_topics._avro_read import SpecCache, decode_event
from thl_topics.errors import ThlDecodeError
from thl_topics.event import ThlEvent

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas" / "avro"

#: Avro single-object encoding marker (spec: "Single object encoding").
MAGIC = b"\xc3\x01"
_HEADER = len(MAGIC) + 8


@dataclass(frozen=True)
class SchemaVersion:
    """One ``thl_event.vN.avsc``: its parsed form and its 8-byte fingerprint."""

    version: int
    parsed: dict[str, Any]
    fingerprint: bytes

    @classmethod
    def load(cls, path: Path) -> SchemaVersion:
        raw = json.loads(path.read_text())
        parsed = parse_schema(raw)
        if not isinstance(parsed, dict):
            raise ValueError(f"{path}: a THL schema must be an Avro record")
        # fastavro's hex is already the little-endian byte order the encoding requires.
        fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
        version = int(path.name.split(".")[1].lstrip("v"))
        return cls(version, parsed, fp)


class ThlCodec:
    """Encodes THL events with the newest schema; decodes any known schema version."""

    def __init__(self, schema_dir: Path = SCHEMA_DIR) -> None:
        versions = sorted((SchemaVersion.load(p) for p in schema_dir.glob("thl_event.v*.avsc")),
                          key=lambda v: v.version)
        if not versions:
            raise FileNotFoundError(f"no thl_event.v*.avsc in {schema_dir}")
        self.current = versions[-1]
        self._by_fingerprint = {v.fingerprint: v for v in versions}
        #: The direct writer knows one schema: used only while that one is the newest.
        self.fast = self.current.fingerprint.hex() == fast_encoder.SCHEMA_FINGERPRINT_HEX
        #: The compiled reader reads records of that same schema (others: fastavro).
        self._fast_read = bytes.fromhex(fast_encoder.SCHEMA_FINGERPRINT_HEX)
        #: Decoded column specs by their encoded bytes (``_avro_read``).
        self._specs = SpecCache()

    @property
    def fingerprint_hex(self) -> str:
        """The writer schema's fingerprint, as carried in the record headers."""
        return self.current.fingerprint.hex()

    def encode(self, event: ThlEvent) -> bytes:
        """Single-object encoding of one event."""
        if self.fast:
            try:
                return fast_encoder.encode_body(event, MAGIC + self.current.fingerprint)
            except (TypeError, AttributeError, KeyError, UnicodeError):
                pass  # a value outside the schema: fastavro says precisely what is wrong
        return self.encode_reference(event)

    def encode_reference(self, event: ThlEvent) -> bytes:
        """Single-object encoding by fastavro from the schema (the direct writer's judge)."""
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(self.current.fingerprint)
        schemaless_writer(out, self.current.parsed, event.to_avro())
        return out.getvalue()

    def decode(self, data: bytes | None, *, topic: str | None = None,
               partition: int | None = None, offset: int | None = None) -> ThlEvent:
        """Decode one record value; any failure is a ``ThlDecodeError`` saying where and why."""
        def error(reason: str) -> ThlDecodeError:
            return ThlDecodeError(reason, topic=topic, partition=partition, offset=offset)

        if data is None:
            raise error("empty value (tombstone)")
        if len(data) < _HEADER or data[:2] != MAGIC:
            raise error("not Avro single-object encoding (bad marker)")
        writer = self._by_fingerprint.get(bytes(data[2:_HEADER]))
        if writer is None:
            raise error(f"unknown schema fingerprint {data[2:_HEADER].hex()}")
        if writer.fingerprint == self._fast_read:
            try:
                return decode_event(bytes(data), _HEADER, self._specs)
            except Exception as exc:  # ValueError, UnicodeDecodeError, ...: a corrupt body
                raise error(f"corrupt body: {type(exc).__name__}: {exc}") from exc
        return self.decode_reference(data, writer, error)

    def decode_reference(self, data: bytes, writer: SchemaVersion | None = None,
                         error: Any = None) -> ThlEvent:
        """Decode by fastavro from the writer schema (the compiled reader's judge, and the
        reader of older schema versions)."""
        if writer is None:
            writer = self._by_fingerprint[bytes(data[2:_HEADER])]
        if error is None:
            def error(reason: str) -> ThlDecodeError:
                return ThlDecodeError(reason)
        body = io.BytesIO(data)
        body.seek(_HEADER)
        try:
            rec = schemaless_reader(body, writer.parsed, None, return_record_name=True)
            if body.tell() != len(data):
                raise ValueError(f"{len(data) - body.tell()} trailing bytes after the record")
            return ThlEvent.from_avro(rec)  # type: ignore[arg-type]
        except ThlDecodeError:
            raise
        except Exception as exc:  # corrupt bodies surface as many different exception types
            raise error(f"corrupt body: {type(exc).__name__}: {exc}") from exc
