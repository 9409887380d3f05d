# cython: language_level=3, boundscheck=False, wraparound=False
"""A row change's rows through their layout's adapter, by a typed loop.

``types.row_adapter`` passes a row whose values are exactly of its layout's plain types (int
and str, no NULL; no U+0000 in the strings that must not hold it) as a copy of itself; that
check is made here in C for every row, and every other row is the adapter's. The unit
tests hold the result equal to the adapter's, row by row, value and type.
"""

from cpython.list cimport PyList_GetSlice


def adapt_rows(tuple plain, tuple nul_free, object adapted, object rows):
    """``[adapted(row) for row in rows]``, where a list row of ``plain``'s types (none of
    its ``nul_free`` strings holding U+0000) is copied without the call."""
    cdef Py_ssize_t i, n = len(plain)
    cdef list out = []
    cdef list row
    cdef bint ok
    for item in rows:
        if type(item) is list and len(<list> item) == n:
            row = <list> item
            ok = True
            for i in range(n):
                if type(row[i]) is not plain[i]:
                    ok = False
                    break
            if ok:
                for i in nul_free:
                    if "\x00" in <str> row[i]:
                        ok = False
                        break
            if ok:
                out.append(PyList_GetSlice(row, 0, n))
                continue
        out.append(adapted(item))
    return out
