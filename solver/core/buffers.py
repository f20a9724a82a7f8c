"""Large work arrays allocated with their pages mapped up front.

A fresh numpy array is backed by pages the OS maps on first touch, one fault per 4 KB page.
On virtual machines that fault cost can dominate building a kernel matrix (measured in
``docs/design-notes.md``; the kernel code reuses one buffer for its inner products for the
same reason).  An anonymous ``mmap`` asks for transparent huge pages (``MADV_HUGEPAGE``: 2 MB
pages, 512 times fewer to map, and fewer TLB misses when the solver walks the array) and maps
them in one call (``MADV_POPULATE_WRITE``, Linux 5.14); where either is refused it is mapped
with ``MAP_POPULATE`` (4 KB pages, in one system call).  Where ``MAP_POPULATE`` does not
exist (not Linux), or for arrays under ``_MIN_BYTES``, this is ``np.empty``.  The mapping is
released when the array is garbage-collected.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

__all__ = ["empty"]

_MIN_BYTES = 32 << 20
_MADV_POPULATE_WRITE = 23  # linux/mman.h (Linux 5.14); not named by Python before 3.13


def empty(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array like ``np.empty``, its pages already mapped."""
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    populate = getattr(mmap, "MAP_POPULATE", None)
    if populate is None or nbytes < _MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(_huge_pages(nbytes) or mmap.mmap(
        -1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate),
        dtype=dtype).reshape(shape)


def _huge_pages(nbytes: int) -> mmap.mmap | None:
    """An anonymous mapping asking for transparent huge pages, mapped; None where the kernel
    refuses either call (no THP support, or older than ``MADV_POPULATE_WRITE``). With THP
    ``never`` the hint is accepted and the pages are 4 KB ones."""
    huge = getattr(mmap, "MADV_HUGEPAGE", None)
    if huge is None:
        return None
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        buf.madvise(huge)
        buf.madvise(getattr(mmap, "MADV_POPULATE_WRITE", _MADV_POPULATE_WRITE))
    except OSError:
        buf.close()
        return None
    return buf
