"""Kernel sums for code outside ``solver/`` (the service's serving path and the worker's
warm-up): the public face of the compiled loops in ``solver.core._numba_kernels``.

Given a block ``G = Z @ SV.T`` of inner products, each function adds
``sum_j k(z_i, sv_j) coef[j]`` to ``out[i]`` without storing the kernel block; for RBF rows of
at most ``DIRECT_RBF_MAX_FEATURES`` features, :func:`add_rbf_sums_from_points` is cheaper and
needs no inner products."""

from __future__ import annotations

import numpy as np

from solver.core import _numba_kernels as _nk
from solver.core.kernels import DIRECT_RBF_MAX_FEATURES

__all__ = ["DIRECT_RBF_MAX_FEATURES", "add_rbf_sums", "add_rbf_sums_from_points",
           "add_poly_sums", "compile_loops", "compile_serving_loops"]


def add_rbf_sums(G: np.ndarray, sa: np.ndarray, sb: np.ndarray, gamma: float,
                 coef: np.ndarray, out: np.ndarray) -> None:
    """``out[i] += sum_j exp(-gamma ||z_i - sv_j||^2) coef[j]``, with ``sa`` and ``sb`` the
    squared norms of the rows and of the support vectors (``coef`` ``(m, k)``, ``out``
    ``(n, k)``)."""
    _nk.rbf_combination(G, sa, sb, gamma, coef, out)


def add_rbf_sums_from_points(Z: np.ndarray, svT: np.ndarray, gamma: float,
                             coef: np.ndarray, out: np.ndarray) -> None:
    """``out[i] += sum_j exp(-gamma ||z_i - sv_j||^2) coef[j]`` from the rows ``Z`` and the
    support vectors transposed (``svT``, ``(d, m)`` C-contiguous, ``d >= 1``)."""
    _nk.rbf_direct_combination(Z, svT, gamma, coef, out)


def add_poly_sums(G: np.ndarray, gamma: float, coef0: float, degree: int,
                  coef: np.ndarray, out: np.ndarray) -> None:
    """``out[i] += sum_j (gamma G_ij + coef0)^degree coef[j]``."""
    _nk.poly_combination(G, gamma, coef0, degree, coef, out)


def compile_serving_loops() -> None:
    """Compile (or load from numba's on-disk cache) the loops a prediction calls, with the
    types the serving path passes (float64, C order): the API process runs it at start, so
    that its first ``/predict`` does not pay for compiling them."""
    x, s = np.eye(2), np.ones(2)
    add_rbf_sums(x, s, s, 1.0, np.ones((2, 1)), np.zeros((2, 1)))
    add_rbf_sums_from_points(x, x, 1.0, np.ones((2, 1)), np.zeros((2, 1)))
    add_poly_sums(x, 1.0, 1.0, 3, np.ones((2, 1)), np.zeros((2, 1)))


def compile_loops() -> None:
    """Compile (or load from numba's on-disk cache) every compiled loop of the local solvers
    once, for the argument types they pass, so that the first job or request does not pay
    for it (``tests/solver/test_compiled_loops.py`` checks that a default fit then compiles
    nothing)."""
    from solver.linear import dsvrg, newton_linear

    _nk.warmup()
    newton_linear.warmup()
    dsvrg.warmup()
