"""The per-job memory limit of a pool child (``SODM_JOB_MEMORY_LIMIT_MB``).

While a job runs, the child's address space (``RLIMIT_AS``) may grow by at most the limit
over what it had mapped when the job started (the interpreter, numpy, numba's code and
thread stacks are not the job's). An allocation past it fails at once, inside numpy or
numba (``MemoryError``) or in an ``mmap`` (``OSError`` ENOMEM), instead of growing until
the kernel's OOM killer takes the whole worker; the runner turns that into a FAILED
``memory-limit`` job and the limit is lifted again, so the same child takes the next job.
"""

from __future__ import annotations

import errno
import importlib
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

MB = 1 << 20

# What a job imports lazily: loaded (and numba's loops compiled) in the pool child before any
# limit applies, so a job never maps a shared library under it (a failed import would leave
# the module half-initialised for every later job of the child)
PRELOAD = ("scipy.linalg", "scipy.optimize", "sklearn.base", "sklearn.model_selection",
           "solver.auto.search", "solver.baselines", "solver.calibration",
           "solver.exact.dcd_kernel", "solver.linear.dcd_linear", "solver.linear.dsvrg",
           "solver.core.formulation", "solver.core.kernels", "solver.margins",
           "solver.sodm.partition", "solver.exact.reduction", "solver.sodm.hierarchy",
           "solver.io.model_io", "worker.prediction.batch", "worker.training.evaluation",
           "worker.training.search")


def preload() -> None:
    """Import what jobs use, compile (or load from numba's cache) its compiled loops and map
    the BLAS work buffers."""
    for name in PRELOAD:
        importlib.import_module(name)
    from solver import kernel_sums

    kernel_sums.compile_loops()
    warm_blas()


def warm_blas() -> None:
    """One multithreaded product in numpy's and in scipy's OpenBLAS. OpenBLAS maps a work
    buffer per thread on first use and, when that mapping fails, exits the process (or
    hangs) instead of raising: under a job's limit that would kill the pool child. Mapped
    here, before any limit, the buffers are reused by every later product."""
    import numpy as np
    from scipy.linalg import blas

    a = np.ones((512, 512))
    a @ a
    blas.dgemm(1.0, a, a)


@contextmanager
def job_memory_limit(limit_mb: int) -> Iterator[None]:
    """Limit the address space that the code inside may add (``limit_mb`` <= 0: no limit);
    the previous limit is restored on the way out, exception or not."""
    if limit_mb <= 0:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = psutil.Process().memory_info().vms + int(limit_mb) * MB
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def out_of_memory(exc: BaseException) -> bool:
    """``exc`` or an exception it was raised from/during is a failed allocation (numba
    wraps errors raised in compiled code, so the whole chain is searched)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, MemoryError):
            return True
        if isinstance(cur, OSError) and cur.errno == errno.ENOMEM:
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False
