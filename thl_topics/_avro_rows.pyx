# cython: language_level=3, boundscheck=False, wraparound=False
"""A row change's rows as Avro bytes, by a typed loop: ``fast_encoder._rows`` in C.

The Avro schema's rows are an array of arrays of the column-value union
(null, long, double, string, bytes); this writes exactly what ``fast_encoder`` writes in
Python (and fastavro before it): the unit tests hold all three equal on every branch and
edge value. A value of no branch is the same TypeError; an int past 64 bits takes the
Python path, which writes it as fastavro would.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free
from libc.stdint cimport int64_t, uint64_t, uint8_t

from thl_topics._byte_buffer cimport Buffer, new, put, reserve

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    bint PyLong_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)
    bint PyBytes_CheckExact(object o)
    bint PyFloat_CheckExact(object o)
    double PyFloat_AS_DOUBLE(object o)
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow) except? -1


cdef int _long(Buffer* b, int64_t value) except -1:
    """Zigzag varint of a signed 64-bit value."""
    cdef uint64_t n = (<uint64_t> value << 1) ^ <uint64_t> (value >> 63)
    reserve(b, 10)
    while n >= 0x80:
        b.data[b.size] = <uint8_t> ((n & 0x7F) | 0x80)
        b.size += 1
        n >>= 7
    b.data[b.size] = <uint8_t> n
    b.size += 1
    return 0


cdef int _raw(Buffer* b, const char* data, Py_ssize_t n) except -1:
    """Avro bytes/string: the length, then the bytes."""
    _long(b, n)
    return put(b, data, n)


cdef int _byte(Buffer* b, uint8_t value) except -1:
    reserve(b, 1)
    b.data[b.size] = value
    b.size += 1
    return 0


def encode_rows(rows, big_long):
    """The Avro bytes of ``rows`` (a sequence of sequences of THL values); ``big_long``
    encodes an int that does not fit 64 bits (the Python writer's ``_long``)."""
    cdef Buffer b
    cdef Py_ssize_t n
    cdef const char* text
    cdef double d
    cdef int overflow
    cdef long long value_ll
    cdef bytes big
    new(&b, 256)
    try:
        if not rows:
            _byte(&b, 0)
        else:
            _long(&b, len(rows))
            for row in rows:
                if not row:
                    _byte(&b, 0)
                    continue
                _long(&b, len(row))
                for value in row:
                    # Exact types, as fastavro's union resolution sees them (a bool is no long).
                    if value is None:
                        _byte(&b, 0)
                    elif PyLong_CheckExact(value):
                        value_ll = PyLong_AsLongLongAndOverflow(value, &overflow)
                        _byte(&b, 2)
                        if overflow:
                            big = big_long(value)
                            put(&b, PyBytes_AS_STRING(big), PyBytes_GET_SIZE(big))
                        else:
                            _long(&b, value_ll)
                    elif PyUnicode_CheckExact(value):
                        text = PyUnicode_AsUTF8AndSize(value, &n)
                        _byte(&b, 6)
                        _raw(&b, text, n)
                    elif PyBytes_CheckExact(value):
                        _byte(&b, 8)
                        _raw(&b, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value))
                    elif PyFloat_CheckExact(value):
                        d = PyFloat_AS_DOUBLE(value)
                        _byte(&b, 4)
                        put(&b, &d, 8)  # little-endian hosts only (x86, arm)
                    else:
                        raise TypeError(f"no THL union branch for {type(value).__name__}: "
                                        f"{value!r}")
                _byte(&b, 0)
            _byte(&b, 0)
        return PyBytes_FromStringAndSize(<const char*> b.data, b.size)
    finally:
        PyMem_Free(b.data)
