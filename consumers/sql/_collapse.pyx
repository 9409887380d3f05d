# cython: language_level=3, boundscheck=False, wraparound=False
"""``collapse.TableChanges`` and ``collapse.picker`` by typed code: the net effects of a
block's row changes, by primary key, in C.

Every row of a set-based block passes here (its key picked, looked up, its net effect kept),
and the block's statements read the net effects back in one pass; as Python this was about a
tenth of a MariaDB group's CPU on bench-compare's workload. ``collapse.TableChanges`` (the
Python class) stays the reference: the unit tests hold both equal on random sequences of
changes, net effect by net effect and error by error.
"""

from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

from consumers.sql.collapse import KeyMoved, NotCollapsed, Unexplained


cdef class Picker:
    """An image's values at ``index``, in that order, as a tuple: its key, or the columns a
    statement takes (callable from Python; called in C by ``TableChanges``)."""

    cdef tuple index
    cdef Py_ssize_t n
    cdef Py_ssize_t first

    def __init__(self, index):
        self.index = tuple(index)
        self.n = len(self.index)
        if self.n == 0:
            raise ValueError("a key of no column")
        self.first = self.index[0]

    cdef tuple pick(self, object image):
        cdef Py_ssize_t i
        cdef tuple out
        cdef object value
        if self.n == 1:
            return (image[self.first],)
        out = PyTuple_New(self.n)
        for i in range(self.n):
            value = image[<Py_ssize_t> self.index[i]]
            Py_INCREF(value)
            PyTuple_SET_ITEM(out, i, value)
        return out

    def __call__(self, image):
        return self.pick(image)


cdef inline object _key(object key_of, object image):
    if type(key_of) is Picker:
        return (<Picker> key_of).pick(image)
    return key_of(image)


cdef class Net:
    """One key's net effect in the block: whether its row was on the target before the
    block, and its after image at the end of it (None: deleted)."""

    cdef public bint existed
    cdef public object image

    def __init__(self, bint existed, object image):
        self.existed = existed
        self.image = image


cdef class TableChanges:
    """One table's changes in a block, by primary key, in the order keys were first
    touched (``collapse.TableChanges``, whose documentation holds for this one)."""

    cdef public dict nets

    def __init__(self):
        self.nets = {}

    def __len__(self):
        return len(self.nets)

    cdef Net _net(self, object key):
        try:
            return <Net> self.nets.get(key)
        except TypeError as exc:  # the dict hashes it
            raise NotCollapsed(f"an unhashable key value: {exc}") from exc

    def insert(self, after, key_of):
        if not self.insert_all((after,), key_of):
            key = _key(key_of, after)
            self._net(key)  # an unhashable key value raises NotCollapsed here
            raise Unexplained(f"key {key!r} inserted while its row is there")

    def insert_all(self, images, key_of):
        """``insert`` of each image in turn, up to the first that cannot be collapsed; how
        many were taken."""
        cdef dict nets = self.nets
        cdef Py_ssize_t taken = 0
        cdef object net, key
        for after in images:
            key = _key(key_of, after)
            try:
                net = nets.get(key)
            except TypeError:  # an unhashable key value
                return taken
            if net is None:
                nets[key] = Net(False, after)
            elif (<Net> net).image is not None:
                return taken  # inserted while its row is there: unexplained
            else:
                (<Net> net).image = after
            taken += 1
        return taken

    def update(self, after, before, before_key, after_key):
        cdef object key = _key(before_key, before)
        if _key(after_key, after) != key:
            raise KeyMoved(f"key {key!r} moved")
        cdef Net net = self._net(key)
        if net is None:
            self.nets[key] = Net(True, after)
        elif net.image is None:
            raise Unexplained(f"key {key!r} updated after its delete")
        else:
            net.image = after

    def update_all(self, after, before, before_key, after_key):
        """``update`` of each pair of images in turn, up to the first that cannot be
        collapsed; how many were taken."""
        cdef Py_ssize_t taken = 0
        if len(after) != len(before):
            raise ValueError(f"{len(after)} after images, {len(before)} before images")
        for new, old in zip(after, before):
            try:
                self.update(new, old, before_key, after_key)
            except NotCollapsed:
                return taken
            taken += 1
        return taken

    def delete(self, before, key_of):
        cdef object key = _key(key_of, before)
        cdef Net net = self._net(key)
        if net is None:
            self.nets[key] = Net(True, None)
        elif net.image is None:
            raise Unexplained(f"key {key!r} deleted twice")
        else:
            net.image = None

    def delete_all(self, before, key_of):
        """``delete`` of each image in turn, up to the first that cannot be collapsed; how
        many were taken."""
        cdef Py_ssize_t taken = 0
        for image in before:
            try:
                self.delete(image, key_of)
            except NotCollapsed:
                return taken
            taken += 1
        return taken

    # -- what the target gets -------------------------------------------------------------

    def must_exist(self):
        return [k for k, n in self.nets.items() if (<Net> n).existed
                and (<Net> n).image is not None]

    def must_not_exist(self):
        return [k for k, n in self.nets.items() if not (<Net> n).existed
                and (<Net> n).image is None]

    def deleted(self):
        return [k for k, n in self.nets.items() if (<Net> n).existed
                and (<Net> n).image is None]

    def inserted(self):
        return iter([(<Net> n).image for n in self.nets.values()
                     if not (<Net> n).existed and (<Net> n).image is not None])

    def upserted(self):
        return iter([(<Net> n).image for n in self.nets.values()
                     if (<Net> n).existed and (<Net> n).image is not None])

    def outcome(self):
        """``(must_exist, must_not_exist, deleted, upserted, inserted)`` as lists, in one
        pass over the keys."""
        cdef list exist = [], absent = [], gone = [], kept = [], new = []
        cdef Net net
        for key, n in self.nets.items():
            net = <Net> n
            if net.existed:
                if net.image is None:
                    gone.append(key)
                else:
                    exist.append(key)
                    kept.append(net.image)
            elif net.image is None:
                absent.append(key)
            else:
                new.append(net.image)
        return exist, absent, gone, kept, new
