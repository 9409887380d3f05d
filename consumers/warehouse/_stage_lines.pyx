# cython: language_level=3, boundscheck=False, wraparound=False
"""A row change's staging lines by a typed loop: ``BatchStager._change`` in C.

A row whose values are all NULLs, ints, floats and strings, in a column that is neither
binary nor (for a zero or partial date) a date, with no empty string and no character that
needs quoting (the separator, a quote, a line break, the NULL marker's), is joined here;
every other row goes to ``fallback``, the field-by-field path, so the text is the same (the
unit tests hold both equal on random rows). Collapsing (each key's earlier line emptied,
the key range kept) is the Python path's, step for step.
"""

from cpython.unicode cimport PyUnicode_GET_LENGTH

cdef extern from "Python.h":
    bint PyLong_CheckExact(object o)
    bint PyFloat_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)

#: The first character of ``staging.NULL_MARK``: a text holding it goes field by field.
cdef Py_UCS4 _MARK = 0x10FFFD


cdef inline bint _plain_str(str text, const unsigned char* special):
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    cdef Py_UCS4 c
    if n == 0:
        return False  # the empty string is quoted: NULL is the empty field
    for i in range(n):
        c = PyUnicode_READ(kind, data, i)
        if c < 128:
            if special[c]:
                return False
        elif c == _MARK:
            return False
    return True


cdef inline bint _incomplete_date(str text):
    """``thl_topics.values.incomplete_date`` of a str: a zero year, month or day."""
    cdef int kind = PyUnicode_KIND(text)
    cdef void* data = PyUnicode_DATA(text)
    if PyUnicode_GET_LENGTH(text) < 10 or PyUnicode_READ(kind, data, 4) != 0x2d \
            or PyUnicode_READ(kind, data, 7) != 0x2d:
        return False
    return (_zeros(kind, data, 0, 4) or _zeros(kind, data, 5, 7)
            or _zeros(kind, data, 8, 10))


cdef inline bint _zeros(int kind, void* data, Py_ssize_t start, Py_ssize_t end):
    cdef Py_ssize_t i
    for i in range(start, end):
        if PyUnicode_READ(kind, data, i) != 0x30:
            return False
    return True


cdef object _plain_text(list values, Py_ssize_t width, tuple dates, str sep,
                        const unsigned char* special):
    """The row's fields joined, or None when one of them needs the field-by-field path."""
    cdef Py_ssize_t i
    cdef object value
    cdef list parts
    if len(values) != width:
        return None
    parts = [None] * width
    for i in range(width):
        value = values[i]
        if value is None:
            parts[i] = ""
        elif PyUnicode_CheckExact(value):
            if not _plain_str(<str> value, special):
                return None
            parts[i] = value
        elif PyLong_CheckExact(value) or PyFloat_CheckExact(value):
            parts[i] = str(value)  # neither holds a separator, a quote or a line break
        else:
            return None
    for i in dates:
        value = values[i]
        if value is not None and (not PyUnicode_CheckExact(value)
                                  or _incomplete_date(<str> value)):
            return None
    return sep.join(parts)


def stage_rows(list lines, list images, Py_ssize_t count, Py_ssize_t row, str tail,
               str sep, bint plain, object last, object key_range, bint ranged, object fallback):
    """Append the lines of ``count`` rows of a row change to ``lines``.

    ``images``: per image of a row (an update's delete half, then its insert half), a tuple
    (head, rows, width, dates, key_at, binary, number): a line is ``head``, the row number,
    ``tail`` and the fields; ``rows[r]`` the r-th row's values, ``dates`` the positions of date columns,
    ``key_at`` the primary key's positions, ``number`` what ``fallback(number, values)``
    (the field-by-field text) is told. ``row``: the first row number; ``plain``: the joined
    shortcut may be taken (not quote_all). ``last``: the segment's line of each key (None:
    not collapsed); ``key_range``: its (lowest, highest) integer key or None.

    Returns (next row number, lines added, lines emptied, last, key_range, ranged): ``last``
    becomes None when a key value cannot be hashed, as in the Python path."""
    cdef unsigned char special[128]
    cdef Py_ssize_t i, r, k, added = 0, emptied = 0
    cdef tuple image, key_at
    cdef list rows, values
    cdef tuple key
    cdef object text, earlier, one, low, high
    if PyUnicode_GET_LENGTH(sep) != 1 or ord(sep) >= 128:
        raise ValueError("the separator must be one ASCII character")
    for i in range(128):
        special[i] = 0
    special[ord(sep)] = special[ord('"')] = special[ord("\n")] = special[ord("\r")] = 1
    for r in range(count):
        for image in images:
            rows = image[1]
            values = rows[r]
            text = None
            if plain and not image[5]:
                text = _plain_text(values, image[2], image[3], sep, special)
            if text is None:
                text = fallback(image[6], values)
            if last is not None:
                key_at = image[4]
                key = tuple([values[k] for k in key_at])
                try:
                    earlier = last.get(key)
                except TypeError:
                    last = None  # a key value without a hash: Spark ranks every line
                else:
                    if earlier is not None:
                        lines[earlier] = ""
                        emptied += 1
                    last[key] = len(lines)
                    if len(key) == 1 and PyLong_CheckExact(key[0]):
                        one = key[0]
                        if key_range is None:
                            key_range = (one, one)
                        else:
                            low, high = key_range
                            if one < low:
                                key_range = (one, high)
                            elif one > high:
                                key_range = (low, one)
                    else:
                        ranged = False
            lines.append(image[0] + str(row) + tail + text)
            added += 1
            row += 1
    return row, added, emptied, last, key_range, ranged
