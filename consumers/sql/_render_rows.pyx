# cython: language_level=3, boundscheck=False, wraparound=False
"""Collapsed rows' VALUES tuples as text, by a typed loop: ``Template.render_images`` in C.

NULLs, non-negative integers and strings without a character of ``special`` are written
here; every other value (a string that needs escaping, a negative integer, a decimal, a
date, bytes...) is the ``literal`` the Python path would call, so the text is the same: the
unit tests hold both equal on random rows of every kind of value and string width.

Where ``hexed`` marks a value's column, a string goes as a hexadecimal literal of its UTF-8
bytes instead (``X'e282ac'``): for MariaDB/MySQL text columns in UTF-8, which store those
bytes as they are, where a quoted literal costs the server a quarter more CPU a row (it
converts each one to its name's character set, ``Item::set_name``, and again to the
column's). 3 marks a utf8mb3 column: a string with a character above U+FFFF keeps
``literal``'s form there, for the server to refuse or replace as it would.
"""

from cpython.unicode cimport PyUnicode_GET_LENGTH

cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)
    int _PyLong_Sign(object o)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    unsigned char* PyUnicode_1BYTE_DATA(object o)
    const char* PyUnicode_AsUTF8AndSize(object o, Py_ssize_t* size) except NULL

cdef const char* _HEX = b"0123456789abcdef"


cdef str _hex_literal(str text):
    """``X'...'`` of the UTF-8 bytes of ``text`` (UnicodeEncodeError for a lone
    surrogate)."""
    cdef Py_ssize_t i, n
    cdef const unsigned char* raw = <const unsigned char*> PyUnicode_AsUTF8AndSize(text, &n)
    cdef str out = PyUnicode_New(2 * n + 3, 127)
    cdef unsigned char* p = PyUnicode_1BYTE_DATA(out)
    p[0] = 88  # X
    p[1] = 39  # '
    for i in range(n):
        p[2 + 2 * i] = _HEX[raw[i] >> 4]
        p[3 + 2 * i] = _HEX[raw[i] & 15]
    p[2 * n + 2] = 39
    return out


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


cdef class _Form:
    """What every row of one call is rendered with."""

    cdef unsigned char table[128]
    cdef unsigned char modes[4096]
    cdef Py_ssize_t n
    cdef tuple pieces
    cdef tuple index
    cdef object literal

    def __init__(self, tuple pieces, tuple index, str special, object literal,
                 tuple hexed):
        cdef Py_ssize_t i, j, n = len(index)
        cdef str text
        for i in range(128):
            self.table[i] = 0
        for text in special:
            if ord(text) >= 128:
                raise ValueError("special characters must be ASCII")
            self.table[ord(text)] = 1
        if len(pieces) != n + 1:
            raise ValueError(f"{len(pieces)} pieces for {n} values")
        if n > 4096:
            raise ValueError(f"{n} values: at most 4096")
        if hexed is not None and len(hexed) != n:
            raise ValueError(f"{len(hexed)} hex marks for {n} values")
        for j in range(n):
            self.modes[j] = 0 if hexed is None else <unsigned char> hexed[j]
        self.n = n
        self.pieces = pieces
        self.index = index
        self.literal = literal

    cdef Py_ssize_t row(self, list parts, object row) except -1:
        """Append one image's text to ``parts`` in pieces; its length in characters."""
        cdef Py_ssize_t j, length = 0
        cdef unsigned char mode
        cdef object value
        cdef str text
        text = self.pieces[0]
        parts.append(text)
        length += PyUnicode_GET_LENGTH(text)
        for j in range(self.n):
            value = row[<Py_ssize_t> self.index[j]]
            if value is None:
                text = "NULL"
            elif PyUnicode_CheckExact(value):
                mode = self.modes[j]
                if mode and (mode == 4 or PyUnicode_KIND(value) != 4):
                    try:
                        text = _hex_literal(<str> value)
                    except UnicodeEncodeError:
                        text = self.literal(value)
                elif _plain(<str> value, self.table):
                    parts.append("'")
                    parts.append(value)
                    length += PyUnicode_GET_LENGTH(<str> value) + 1  # the opening quote
                    text = "'"
                else:
                    text = self.literal(value)
            elif PyLong_CheckExact(value) and _PyLong_Sign(value) >= 0:
                text = str(value)
            else:
                text = self.literal(value)
            parts.append(text)
            length += PyUnicode_GET_LENGTH(text)
            text = self.pieces[j + 1]
            parts.append(text)
            length += PyUnicode_GET_LENGTH(text)
        return length


def render_images(tuple pieces, object rows, tuple index, str special, object literal,
                  tuple hexed=None):
    """Each image's text: ``pieces[0]``, the literal of ``image[index[0]]``, ``pieces[1]``
    ... ``pieces[-1]``; a string holding a character of ``special`` (ASCII), or any value
    but None, an int >= 0 or a str, goes to ``literal``. ``hexed``: per value, 4 (or 3)
    where a string is written in hexadecimal (above), 0 where not."""
    cdef _Form form = _Form(pieces, index, special, literal, hexed)
    cdef list out = []
    cdef list parts
    for row in rows:
        parts = []
        form.row(parts, row)
        out.append("".join(parts))
    return out


def render_joined(tuple pieces, object rows, tuple index, str special, object literal,
                  tuple hexed, Py_ssize_t limit, str head, str tail):
    """``render_images``' texts joined by commas between ``head`` and ``tail``, in
    statements of rows whose texts (and a comma each) reach ``limit`` characters at most
    (one row at least); each with its number of rows. Each statement's text is joined
    once from the rows' pieces: no string per row."""
    cdef _Form form = _Form(pieces, index, special, literal, hexed)
    cdef list out = []
    cdef list parts = [head]
    cdef list rest
    cdef Py_ssize_t start, length, size = 0, count = 0
    for row in rows:
        start = len(parts)
        if count:
            parts.append(",")
        length = form.row(parts, row)
        if count and size + length > limit:
            rest = parts[start + 1:]
            del parts[start:]
            parts.append(tail)
            out.append(("".join(parts), count))
            parts = [head]
            parts.extend(rest)
            size = count = 0
        size += length + 1
        count += 1
    if count:
        parts.append(tail)
        out.append(("".join(parts), count))
    return out


cdef extern from "Python.h":
    object PyBytes_FromStringAndSize(const char* v, Py_ssize_t n)
    int PyBytes_AsStringAndSize(object o, char** buffer, Py_ssize_t* length) except -1

from cpython.mem cimport PyMem_Free

from thl_topics._byte_buffer cimport Buffer, new, put, reserve


cdef int _escaped(Buffer* b, const unsigned char* src, Py_ssize_t n) except -1:
    """``src`` as a COPY text field: backspace, tab, newline, vertical tab, form feed,
    carriage return and backslash as psycopg escapes them."""
    cdef Py_ssize_t i
    cdef unsigned char c
    cdef unsigned char* out
    reserve(b, 2 * n)
    out = b.data + b.size
    for i in range(n):
        c = src[i]
        if c == 92:
            out[0] = 92
            out[1] = 92
            out += 2
        elif 8 <= c <= 13:
            out[0] = 92
            out[1] = b"btnvfr"[c - 8]
            out += 2
        else:
            out[0] = c
            out += 1
    b.size = out - b.data
    return 0


def copy_text(object rows, tuple index, object dump, bint utf8):
    """The rows' values at ``index`` as a text-format COPY's data, as psycopg's
    ``Copy.write_row`` writes them: NULL as ``\\N``, fields escaped and separated by tabs,
    a newline after each row. Integers (not bool) are written here, and strings too where
    the connection's encoding is UTF-8 (``utf8``) and they hold no U+0000 (psycopg's
    error for it comes from ``dump``); ``dump(value)`` gives the bytes of psycopg's text
    dumper for every other value (None: NULL)."""
    cdef Buffer out
    cdef Py_ssize_t j, n = len(index), size
    cdef const char* text
    cdef char* raw
    cdef object value, dumped
    cdef bytes digits
    new(&out, 4096)
    try:
        for row in rows:
            for j in range(n):
                if j:
                    put(&out, "\t", 1)
                value = row[<Py_ssize_t> index[j]]
                if value is None:
                    put(&out, "\\N", 2)
                    continue
                if PyLong_CheckExact(value):
                    digits = str(value).encode("ascii")
                    PyBytes_AsStringAndSize(digits, &raw, &size)
                    put(&out, raw, size)
                    continue
                if utf8 and PyUnicode_CheckExact(value) and "\x00" not in <str> value:
                    try:
                        text = PyUnicode_AsUTF8AndSize(value, &size)
                    except UnicodeEncodeError:
                        pass  # a lone surrogate: psycopg's dumper says what is wrong
                    else:
                        _escaped(&out, <const unsigned char*> text, size)
                        continue
                dumped = dump(value)
                if dumped is None:  # a dumper may write a value as NULL, as psycopg does
                    put(&out, "\\N", 2)
                    continue
                dumped = bytes(dumped)
                PyBytes_AsStringAndSize(dumped, &raw, &size)
                _escaped(&out, <const unsigned char*> raw, size)
            put(&out, "\n", 1)
        return PyBytes_FromStringAndSize(<const char*> out.data, out.size)
    finally:
        PyMem_Free(out.data)
