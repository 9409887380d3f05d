# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Row images of a rows event read by typed loops over the packet bytes.

``row_decoder`` builds, per table, one kind code per column (``KINDS``); this module reads
the kinds it knows in C and calls the Python column decoder for the rest (``K_PY``), so a
table with one DECIMAL still has its integers and strings read here. Every value comes out
as the Python decoder would make it: the same type, the same value (the unit tests decode
random rows both ways and compare them). Reading never goes past the packet: a row image
that would is a ValueError naming the byte.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_Decode
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

# Kind codes: keep in step with row_decoder's.
cdef enum:
    K_PY = 0
    K_I8 = 1
    K_U8 = 2
    K_I16 = 3
    K_U16 = 4
    K_I24 = 5
    K_U24 = 6
    K_I32 = 7
    K_U32 = 8
    K_I64 = 9
    K_U64 = 10
    K_F32 = 11
    K_F64 = 12
    K_TEXT = 13
    K_BYTES = 14

cdef uint64_t _LONG_MAX = 0x7FFFFFFFFFFFFFFF


cdef inline uint64_t _le(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef class RowReader:
    """The row images of one table layout (one per table decoder)."""

    cdef int ncols
    cdef int bitmap_len
    cdef int[::1] kinds
    cdef int[::1] sizes
    cdef tuple encodings
    cdef tuple fallbacks

    def __init__(self, kinds, sizes, encodings, fallbacks):
        """``kinds``/``sizes`` per column (a string's length-prefix width), ``encodings`` the
        codec name of each text column ("" for others), ``fallbacks`` the Python decoder of
        each column (called for K_PY columns only)."""
        import array
        self.kinds = array.array("i", kinds)
        self.sizes = array.array("i", sizes)
        self.encodings = tuple(e.encode("ascii") for e in encodings)
        self.fallbacks = tuple(fallbacks)
        self.ncols = len(self.encodings)
        if not (len(self.kinds) == len(self.sizes) == self.ncols == len(self.fallbacks)):
            raise ValueError("one kind, size, encoding and fallback per column")
        self.bitmap_len = (self.ncols + 7) // 8

    def rows(self, bytes data, Py_ssize_t pos, Py_ssize_t end):
        """Every row image from ``pos`` to ``end``, in order, as lists of values."""
        cdef list out = []
        cdef Py_ssize_t limit = PyBytes_GET_SIZE(data)
        if end > limit:
            raise ValueError(f"row images end at byte {end}, past the packet's {limit}")
        while pos < end:
            row, pos = self._row(data, pos, end)
            out.append(row)
        if pos != end:
            raise ValueError(f"row images end at byte {pos} of the packet, the event at {end}")
        return out

    cdef tuple _row(self, bytes data, Py_ssize_t pos, Py_ssize_t end):
        cdef const uint8_t* buf = <const uint8_t*> PyBytes_AS_STRING(data)
        cdef int i, kind, size
        cdef Py_ssize_t n
        cdef uint64_t u
        cdef float f
        cdef double d
        cdef object value
        cdef list values
        cdef const uint8_t* nulls
        if pos + self.bitmap_len > end:
            raise ValueError(f"a row image's NULL bitmap at byte {pos} runs past byte {end}")
        nulls = buf + pos
        pos += self.bitmap_len
        values = PyList_New(self.ncols)
        for i in range(self.ncols):
            if nulls[i >> 3] & (1 << (i & 7)):
                value = None
            else:
                kind = self.kinds[i]
                size = self.sizes[i]
                if kind == K_PY:
                    try:
                        value, pos = self.fallbacks[i](data, pos)
                    except Exception as exc:
                        # A cut image shows up in Python decoders as IndexError and the like.
                        raise ValueError(f"column {i + 1} at byte {pos}: {exc!r}") from exc
                    if pos > end:
                        raise ValueError(f"column {i + 1} ends at byte {pos}, past byte {end}")
                elif kind == K_TEXT or kind == K_BYTES:
                    if pos + size > end:
                        raise ValueError(f"column {i + 1}'s length at byte {pos} runs past "
                                         f"byte {end}")
                    n = <Py_ssize_t> _le(buf + pos, size)
                    pos += size
                    if pos + n > end:
                        raise ValueError(f"column {i + 1}'s {n} bytes at byte {pos} run past "
                                         f"byte {end}")
                    if kind == K_TEXT:
                        value = PyUnicode_Decode(<const char*> buf + pos, n,
                                                 self.encodings[i], "strict")
                    else:
                        value = PyBytes_FromStringAndSize(<const char*> buf + pos, n)
                    pos += n
                else:
                    if pos + size > end:
                        raise ValueError(f"column {i + 1} at byte {pos} runs past byte {end}")
                    u = _le(buf + pos, size)
                    pos += size
                    if kind == K_I8:
                        value = <int8_t> u
                    elif kind == K_U8 or kind == K_U16 or kind == K_U24 or kind == K_U32:
                        value = <int64_t> u
                    elif kind == K_I16:
                        value = <int16_t> u
                    elif kind == K_I24:
                        value = <int32_t> ((<uint32_t> u) << 8) >> 8
                    elif kind == K_I32:
                        value = <int32_t> u
                    elif kind == K_I64:
                        value = <int64_t> u
                    elif kind == K_U64:
                        # Past a signed 64-bit long the THL carries the digits (row_values).
                        value = <int64_t> u if u <= _LONG_MAX else str(u)
                    elif kind == K_F32:
                        memcpy(&f, buf + pos - 4, 4)
                        value = <double> f
                    elif kind == K_F64:
                        memcpy(&d, buf + pos - 8, 8)
                        value = d
                    else:
                        raise ValueError(f"column {i + 1}: unknown kind {kind}")
            Py_INCREF(value)
            PyList_SET_ITEM(values, i, value)
        return values, pos
