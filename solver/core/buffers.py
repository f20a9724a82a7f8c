"""Large work arrays allocated with their pages mapped up front.

A fresh numpy array is backed by pages the OS maps on first touch, one fault per 4 KB page.
On virtual machines that fault cost can dominate building a kernel matrix (measured in
``docs/design-notes.md``; the kernel code reuses one buffer for its inner products for the
same reason).  An
anonymous ``mmap`` with ``MAP_POPULATE`` maps the pages in one system call.  Where
``MAP_POPULATE`` does not exist (not Linux), or for arrays under ``_MIN_BYTES``, this is
``np.empty``.  The mapping is released when the array is garbage-collected.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

__all__ = ["empty"]

_MIN_BYTES = 32 << 20


def empty(shape: int | tuple[int, ...], dtype=np.float64) -> np.ndarray:
    """An uninitialised C-contiguous array like ``np.empty``, its pages already mapped."""
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    populate = getattr(mmap, "MAP_POPULATE", None)
    if populate is None or nbytes < _MIN_BYTES:
        return np.empty(shape, dtype=dtype)
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)
