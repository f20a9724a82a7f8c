"""Which BLAS kernels a benchmark ran: the libraries numpy and scipy loaded (threadpoolctl)
with the kernel set each chose, and ``OPENBLAS_CORETYPE`` where the environment forces one.

OpenBLAS picks its kernels from the CPU when it loads, unless ``OPENBLAS_CORETYPE`` names a
set; some machines set it (and ``OPENBLAS_L2_SIZE``) to an older set (Haswell's AVX2 kernels
on CPUs with AVX-512), which halves float32 GEMM there. A record that says which kernels ran
can be compared with one from another machine or another environment.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV_VARS", "blas_kernels", "describe"]

ENV_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def blas_kernels() -> dict[str, Any]:
    """``{"env": {var: value or None}, "libraries": [{"api", "version", "architecture",
    "prefix"}]}`` for the BLAS libraries of numpy and scipy.linalg (loaded here if not yet)."""
    import numpy  # noqa: F401  (loads numpy's BLAS)
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS)
    from threadpoolctl import threadpool_info

    libs = [{"api": i.get("internal_api"), "version": i.get("version"),
             "architecture": i.get("architecture"), "prefix": i.get("prefix")}
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return {"env": {v: os.environ.get(v) for v in ENV_VARS}, "libraries": libs}


def describe(info: dict[str, Any]) -> str:
    """One line: each library's kernels, then the forcing variables (or that none is set)."""
    libs = ", ".join(f"{lib['prefix']} {lib['api']} {lib['version']}: "
                     f"{lib['architecture']} kernels" for lib in info["libraries"]) or "none"
    env = ", ".join(f"{k}={v}" for k, v in info["env"].items() if v is not None)
    return f"BLAS {libs}; " + (env or f"no {' / '.join(ENV_VARS)} set")
