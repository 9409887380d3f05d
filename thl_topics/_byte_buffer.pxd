# cython: language_level=3
"""A growing byte buffer for the compiled writers (the THL's Avro rows, a COPY's data):
``new``, ``reserve`` room, ``put`` bytes, then ``PyMem_Free`` its data."""

from cpython.mem cimport PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport uint8_t
from libc.string cimport memcpy


cdef struct Buffer:
    uint8_t* data
    Py_ssize_t size
    Py_ssize_t cap


cdef inline int new(Buffer* b, Py_ssize_t cap) except -1:
    b.data = <uint8_t*> PyMem_Malloc(cap)
    if b.data == NULL:
        raise MemoryError()
    b.size = 0
    b.cap = cap
    return 0


cdef inline int reserve(Buffer* b, Py_ssize_t more) except -1:
    """Room for ``more`` bytes after ``size`` (the capacity at least doubled)."""
    cdef Py_ssize_t cap
    cdef uint8_t* grown
    if b.size + more <= b.cap:
        return 0
    cap = max(b.cap * 2, b.size + more)
    grown = <uint8_t*> PyMem_Realloc(b.data, cap)
    if grown == NULL:
        raise MemoryError()
    b.data = grown
    b.cap = cap
    return 0


cdef inline int put(Buffer* b, const void* data, Py_ssize_t n) except -1:
    reserve(b, n)
    memcpy(b.data + b.size, data, n)
    b.size += n
    return 0
