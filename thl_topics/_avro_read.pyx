# cython: language_level=3, boundscheck=False, wraparound=False
"""A THL event read from its Avro body by typed code: the mirror of ``fast_encoder``.

fastavro decodes into nested dicts that ``ThlEvent.from_avro`` then turns into objects,
resolving every union by name; on a consumer's hot path (many small row changes) that cost
about 80 us per row, most of it rebuilding the same column specs for every row change of a
table. This reader knows the one schema ``fast_encoder`` writes (``thl_event.v2.avsc``;
``ThlCodec`` uses it only for records of that fingerprint), builds the objects directly,
and keeps the decoded column specs of each table shape by their bytes, so a row change of
a table already seen costs one dict lookup for its specs. Spec lists are shared between row
changes as the extractor shares them; nothing changes a spec once made.

Every read is bounds-checked: a truncated or corrupt body raises ``ValueError`` (the codec
turns it into a ``ThlDecodeError``), never reads past the buffer. Arrays and maps accept
Avro's block form (several blocks, negative counts with a byte size), as fastavro does.
``tests/unit/thl_topics/test_fast_decoder.py`` holds it equal to fastavro on every kind of
value and every field.
"""

from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcmp, memcpy

from thl_topics.event import ColumnSpec, RowAction, RowChange, Statement, ThlEvent
from thl_topics.schema_change import ChangeKind, SchemaChange

_ACTIONS = (RowAction.INSERT, RowAction.UPDATE, RowAction.DELETE)
_KINDS = tuple(ChangeKind)
_SPEC_CACHE_MAX = 4096


cdef class SpecCache:
    """Decoded column specs kept between events: by their encoded bytes, and the last ones
    of each table shape with their bytes."""

    cdef dict by_bytes
    cdef dict recent

    def __init__(self):
        self.by_bytes = {}
        self.recent = {}


cdef class _Body:
    cdef const unsigned char* data
    cdef Py_ssize_t pos
    cdef Py_ssize_t end
    cdef bytes keep

    cdef int need(self, Py_ssize_t n) except -1:
        if n < 0 or self.end - self.pos < n:
            raise ValueError(f"truncated body: {n} bytes wanted at byte {self.pos} of "
                             f"{self.end}")
        return 0

    cdef int64_t long_(self) except? -1:
        """A zigzag varint of at most ten bytes, read as fastavro reads it (bits past 64
        dropped: a value the writers never write)."""
        cdef uint64_t n = 0
        cdef int shift = 0
        cdef unsigned char b
        while True:
            self.need(1)
            b = self.data[self.pos]
            self.pos += 1
            n |= (<uint64_t> (b & 0x7F)) << shift
            if not (b & 0x80):
                return <int64_t> ((n >> 1) ^ (0 - (n & 1)))
            shift += 7
            if shift > 63:
                raise ValueError(f"varint longer than ten bytes at byte {self.pos}")

    cdef Py_ssize_t small(self) except? -1:
        """A varint used as a count, length or index (64-bit hosts: a long fits)."""
        return <Py_ssize_t> self.long_()

    cdef Py_ssize_t length(self) except -1:
        cdef Py_ssize_t n = self.small()
        if n < 0:
            raise ValueError(f"negative length {n} at byte {self.pos}")
        self.need(n)
        return n

    cdef str string(self):
        cdef Py_ssize_t n = self.length()
        cdef Py_ssize_t at = self.pos
        self.pos += n
        return PyUnicode_DecodeUTF8(<const char*> self.data + at, n, NULL)

    cdef bytes raw(self):
        cdef Py_ssize_t n = self.length()
        cdef Py_ssize_t at = self.pos
        self.pos += n
        return (<const char*> self.data)[at:at + n]

    cdef bint boolean(self) except -1:
        cdef unsigned char b
        self.need(1)
        b = self.data[self.pos]
        self.pos += 1
        if b > 1:
            raise ValueError(f"boolean byte {b} at byte {self.pos - 1}")
        return b == 1

    cdef double double(self) except? -1.0:
        cdef double d
        self.need(8)
        memcpy(&d, self.data + self.pos, 8)  # little-endian hosts only (x86, arm)
        self.pos += 8
        return d

    cdef Py_ssize_t block(self) except -1:
        """The item count of the next array or map block (0: the end)."""
        cdef Py_ssize_t n = self.small()
        if n < 0:
            self.small()  # the block's size in bytes, for readers that skip it
            n = -n
        return n

    cdef Py_ssize_t index(self, Py_ssize_t branches) except -1:
        cdef Py_ssize_t i = self.small()
        if i < 0 or i >= branches:
            raise ValueError(f"union or enum index {i} out of range at byte {self.pos}")
        return i

    cdef object optional_string(self):
        return None if self.index(2) == 0 else self.string()

    cdef dict string_map(self):
        cdef Py_ssize_t i
        cdef dict out = {}
        cdef Py_ssize_t n = self.block()
        while n:
            for i in range(n):
                key = self.string()
                out[key] = self.string()
            n = self.block()
        return out

    cdef list strings(self):
        cdef Py_ssize_t i
        cdef list out = []
        cdef Py_ssize_t n = self.block()
        while n:
            for i in range(n):
                out.append(self.string())
            n = self.block()
        return out

    cdef object value(self):
        cdef Py_ssize_t branch = self.index(5)
        if branch == 0:
            return None
        if branch == 1:
            return self.long_()
        if branch == 2:
            return self.double()
        if branch == 3:
            return self.string()
        return self.raw()

    cdef list rows(self):
        cdef Py_ssize_t i
        cdef list out = []
        cdef list row
        cdef Py_ssize_t n = self.block()
        cdef Py_ssize_t m
        while n:
            for i in range(n):
                row = []
                m = self.block()
                while m:
                    for i in range(m):
                        row.append(self.value())
                    m = self.block()
                out.append(row)
            n = self.block()
        return out

    cdef object spec(self):
        index = self.small()
        name = self.string()
        type_ = self.string()
        length = self.long_()
        scale = self.long_()
        unsigned = self.boolean()
        nullable = self.boolean()
        blob = self.boolean()
        charset = self.optional_string()
        primary_key = self.boolean()
        return ColumnSpec(index, name, type_, length, scale, unsigned, nullable, blob, charset,
                          primary_key, self.strings())

    cdef list specs(self):
        cdef Py_ssize_t i
        cdef list out = []
        cdef Py_ssize_t n = self.block()
        while n:
            for i in range(n):
                out.append(self.spec())
            n = self.block()
        return out

    cdef list cached_specs(self, SpecCache cache, tuple shape):
        """The specs of ``shape`` (schema, table, which): the same bytes as last time cost
        one comparison (an Avro encoding is prefix-free: bytes that start with a complete
        encoding of the array hold that array); other bytes seen before one lookup."""
        cdef Py_ssize_t start = self.pos
        cdef Py_ssize_t n
        cdef bytes encoded
        entry = cache.recent.get(shape)
        if entry is not None:
            encoded = entry[0]
            n = len(encoded)
            if self.end - self.pos >= n and memcmp(self.data + self.pos,
                                                   <const char*> encoded, n) == 0:
                self.pos += n
                return entry[1]
        self.skip_specs()
        encoded = (<const char*> self.data)[start:self.pos]
        specs = cache.by_bytes.get(encoded)
        if specs is None:
            self.pos = start
            specs = self.specs()
            if len(cache.by_bytes) >= _SPEC_CACHE_MAX:
                cache.by_bytes.clear()
                cache.recent.clear()
            cache.by_bytes[encoded] = specs
        cache.recent[shape] = (encoded, specs)
        return specs

    cdef int skip_specs(self) except -1:
        cdef Py_ssize_t i
        cdef Py_ssize_t n = self.block()
        cdef Py_ssize_t m
        while n:
            for i in range(n):
                self.small()
                self.pos += self.length()  # name
                self.pos += self.length()  # type
                self.skip_long()
                self.skip_long()
                self.need(3)
                self.pos += 3  # unsigned, nullable, blob
                if self.index(2):
                    self.pos += self.length()
                self.need(1)
                self.pos += 1  # primary_key
                m = self.block()
                while m:
                    for i in range(m):
                        self.pos += self.length()
                    m = self.block()
            n = self.block()
        return 0

    cdef int skip_long(self) except -1:
        while True:
            self.need(1)
            self.pos += 1
            if not (self.data[self.pos - 1] & 0x80):
                return 0

    cdef object row_change(self, SpecCache cache):
        action = _ACTIONS[self.index(3)]
        schema = self.string()
        table = self.string()
        column_specs = self.cached_specs(cache, (schema, table, 0))
        key_specs = self.cached_specs(cache, (schema, table, 1))
        return RowChange(action, schema, table, column_specs, key_specs, self.rows(),
                         self.rows())

    cdef object schema_change(self):
        kind = _KINDS[self.index(len(_KINDS))]
        schema = self.string()
        table = self.string()
        column = self.optional_string()
        new_name = self.optional_string()
        new_schema = self.optional_string()
        column_type = self.optional_string()
        nullable = None if self.index(2) == 0 else self.boolean()
        position = self.optional_string()
        index = self.optional_string()
        columns = tuple(self.strings())
        return SchemaChange(kind, schema, table, column, new_name, new_schema, column_type,
                            nullable, position, index, columns, self.boolean())

    cdef object statement(self):
        cdef Py_ssize_t i
        cdef Py_ssize_t n
        sql = self.string()
        default_schema = self.optional_string()
        options = self.string_map()
        error_code = self.small()
        timestamp = None if self.index(2) == 0 else self.long_()
        changes = None
        if self.index(2):
            changes = []
            n = self.block()
            while n:
                for i in range(n):
                    changes.append(self.schema_change())
                n = self.block()
        return Statement(sql, default_schema, options, error_code, timestamp, changes)


def decode_event(bytes data, Py_ssize_t start, SpecCache spec_cache):
    """The ThlEvent whose v2 body starts at ``start`` of ``data`` and ends at its end;
    ``spec_cache`` keeps decoded column specs by their encoded bytes between calls."""
    cdef Py_ssize_t i
    cdef _Body body = _Body()
    cdef list items = []
    cdef Py_ssize_t n
    body.keep = data
    body.data = <const unsigned char*> (<const char*> data)
    body.pos = start
    body.end = len(data)
    if start < 0 or start > body.end:
        raise ValueError(f"body start {start} outside {body.end} bytes")
    seqno = body.long_()
    fragno = body.small()
    last_frag = body.boolean()
    epoch = body.long_()
    source_id = body.string()
    event_id = body.string()
    shard_id = body.string()
    tstamp = body.long_()
    metadata = body.string_map()
    n = body.block()
    while n:
        for i in range(n):
            if body.index(2) == 0:
                items.append(body.statement())
            else:
                items.append(body.row_change(spec_cache))
        n = body.block()
    if body.pos != body.end:
        raise ValueError(f"{body.end - body.pos} trailing bytes after the record")
    return ThlEvent(seqno, epoch, source_id, event_id, shard_id, tstamp, fragno, last_frag,
                    metadata, items)
