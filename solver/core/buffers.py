"""Large work arrays allocated with their pages mapped up front, and reused within a fit.

A fresh numpy array is backed by pages the OS maps on first touch, one fault per 4 KB page.
On virtual machines that fault cost can dominate building a kernel matrix (measured in
``docs/design-notes.md``; the kernel code reuses one buffer for its inner products for the
same reason).  An anonymous ``mmap`` is mapped in one call instead (``MADV_POPULATE_WRITE``,
Linux 5.14, else ``MAP_POPULATE``).  Where neither exists (not Linux), or for arrays under
``_MIN_BYTES``, this is ``np.empty``.  The mapping is released when the array is
garbage-collected.  (Why not transparent huge pages: ``docs/design-notes.md``.)

Inside :func:`reuse` (a fit's sequential partition solves), a mapping whose arrays have all
been garbage-collected is kept and handed to the next request of about its size, so a level
of equal partitions maps its kernel matrix's pages once, not once per partition.  Memory is
never shared with a live array (the mapping returns only when its array and every view of it
are gone), and the kept mappings are released when the block ends.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

__all__ = ["empty", "reuse"]

_MIN_BYTES = 32 << 20
_MADV_POPULATE_WRITE = 23  # linux/mman.h (Linux 5.14); not named by Python before 3.13
# a reused mapping serves requests from this share of its size up to all of it
REUSE_MIN_SHARE = 0.5
# a mapping made inside reuse() reserves this much more address space than asked (mapped
# only when a later, larger request uses it), so slightly larger partitions still fit
REUSE_HEADROOM = 1 / 8


def empty(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array like ``np.empty``, its pages already mapped."""
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if getattr(mmap, "MAP_POPULATE", None) is None or nbytes < _MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    arena = _ARENA.get()
    if arena is not None:
        return arena.array(nbytes, dtype, count).reshape(shape)
    return np.frombuffer(_mapped(nbytes), dtype=dtype, count=count).reshape(shape)


@contextmanager
def reuse() -> Iterator[None]:
    """Within the block (this thread or task only), :func:`empty` reuses the mappings of
    arrays that have been garbage-collected (see the module docstring)."""
    token = _ARENA.set(_Arena())
    try:
        yield
    finally:
        _ARENA.reset(token)


class _Mapping:
    """One anonymous mapping of ``size`` bytes, its first ``populated`` bytes mapped."""

    def __init__(self, nbytes: int) -> None:
        self.size = -(-int(nbytes * (1 + REUSE_HEADROOM)) // mmap.PAGESIZE) * mmap.PAGESIZE
        self.buf = _populated(self.size, nbytes)
        if self.buf is None:  # no MADV_POPULATE_WRITE: exactly the request, MAP_POPULATE
            self.buf, self.size = _mapped(nbytes), nbytes
        self.populated = nbytes

    def grow_to(self, nbytes: int) -> None:
        """Map the pages up to ``nbytes`` (within ``size``) ahead of use."""
        if nbytes > self.populated:
            start = self.populated // mmap.PAGESIZE * mmap.PAGESIZE
            with contextlib.suppress(OSError):  # else faulted in on first touch
                self.buf.madvise(_populate_write(), start, nbytes - start)
            self.populated = nbytes


class _Arena:
    """The mappings kept by one :func:`reuse` block; ``free`` holds those no array uses."""

    def __init__(self) -> None:
        self.free: list[_Mapping] = []

    def array(self, nbytes: int, dtype: np.dtype, count: int) -> np.ndarray:
        fits = [m for m in self.free if nbytes <= m.size and nbytes >= REUSE_MIN_SHARE * m.size]
        if fits:
            mapping = min(fits, key=lambda m: m.size)
            self.free.remove(mapping)
            mapping.grow_to(nbytes)
        else:
            # free mappings too small for this request let go (a larger level follows);
            # larger ones stay for the next request of their size
            self.free[:] = [m for m in self.free if m.size >= nbytes]
            mapping = _Mapping(nbytes)
        out = np.frombuffer(mapping.buf, dtype=dtype, count=count)
        # every view of ``out`` keeps it alive, so this runs once none is left
        weakref.finalize(out, self.free.append, mapping).atexit = False
        return out


_ARENA: ContextVar[_Arena | None] = ContextVar("solver_buffers_arena", default=None)


def _populate_write() -> int:
    return getattr(mmap, "MADV_POPULATE_WRITE", _MADV_POPULATE_WRITE)


def _mapped(nbytes: int) -> mmap.mmap:
    """``nbytes`` of anonymous memory, every page mapped."""
    return _populated(nbytes) or mmap.mmap(
        -1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE)


def _populated(nbytes: int, populate: int | None = None) -> mmap.mmap | None:
    """An anonymous mapping of ``nbytes``, its first ``populate`` bytes (default: all)
    mapped by ``MADV_POPULATE_WRITE``; None where the kernel refuses it (before 5.14)."""
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf.madvise(_populate_write(), 0, nbytes if populate is None else populate)
    except OSError:
        buf.close()
        return None
    return buf
