# cython: language_level=3, boundscheck=False, wraparound=False
"""Collapsed rows' VALUES tuples as text, by a typed loop: ``Template.render_images`` in C.

NULLs, non-negative integers and strings without a character of ``special`` are written
here; every other value (a string that needs escaping, a negative integer, a decimal, a
date, bytes...) is the ``literal`` the Python path would call, so the text is the same: the
unit tests hold both equal on random rows of every kind of value and string width.
"""

from cpython.unicode cimport PyUnicode_GET_LENGTH

cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)
    int _PyLong_Sign(object o)


cdef inline bint _plain(str text, const unsigned char* special):
    """True if no character of ``text`` is marked in ``special`` (ASCII only)."""
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_UCS4 c
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if c < 128 and special[c]:
            return False
    return True


def render_images(tuple pieces, object rows, tuple index, str special, object literal):
    """Each image's text: ``pieces[0]``, the literal of ``image[index[0]]``, ``pieces[1]``
    ... ``pieces[-1]``; a string holding a character of ``special`` (ASCII), or any value
    but None, an int >= 0 or a str, goes to ``literal``."""
    cdef unsigned char table[128]
    cdef Py_ssize_t i, j, n = len(index)
    cdef list out = []
    cdef list parts
    cdef object value
    cdef str text
    for i in range(128):
        table[i] = 0
    for text in special:
        if ord(text) >= 128:
            raise ValueError("special characters must be ASCII")
        table[ord(text)] = 1
    if len(pieces) != n + 1:
        raise ValueError(f"{len(pieces)} pieces for {n} values")
    for row in rows:
        parts = [pieces[0]]
        for j in range(n):
            value = row[<Py_ssize_t> index[j]]
            if value is None:
                parts.append("NULL")
            elif PyUnicode_CheckExact(value):
                if _plain(<str> value, table):
                    parts.append("'")
                    parts.append(value)
                    parts.append("'")
                else:
                    parts.append(literal(value))
            elif PyLong_CheckExact(value) and _PyLong_Sign(value) >= 0:
                parts.append(str(value))
            else:
                parts.append(literal(value))
            parts.append(pieces[j + 1])
        out.append("".join(parts))
    return out
