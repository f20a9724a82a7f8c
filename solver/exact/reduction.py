"""A support-vector budget for kernel models: the decision function projected onto fewer rows.

ODM solutions are dense in support vectors (every row outside the band ``[1 - theta,
1 + theta]`` has a nonzero dual), so prediction cost and model size grow with the data.
With a budget ``B`` smaller than the number of support vectors, ``B`` of them are drawn
uniformly at random (seeded) and the decision function ``f = sum_i c_i k(x_i, .)`` is
replaced by its orthogonal projection in the kernel's feature space onto their span,

    f_B = sum_j b_j k(z_j, .),    (K_ZZ + eps I) b = K_ZS c,

one ``B x B`` Cholesky solve for every problem at once (``c`` may hold one column per
one-vs-rest problem).  ``eps`` is a relative jitter for rows that are numerically
dependent.  The measurements of accuracy against the budget are in
``docs/design-notes.md``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from solver.core.kernels import Kernel, kernel_combination, kernel_diag, kernel_matrix

__all__ = ["project_support"]

# diagonal jitter relative to the mean kernel diagonal; raised by JITTER_STEP while the
# Cholesky of K_ZZ fails (duplicate rows make it singular)
JITTER = 1e-8
JITTER_STEP = 100.0
JITTER_MAX = 1e-2


def project_support(Z, coef: np.ndarray, kernel: Kernel, budget: int, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Rows to keep (sorted indices into ``Z``) and their coefficients, shape
    ``(n_problems, len(keep))``, for the support vectors ``Z`` (model space) with dual
    coefficients ``coef`` of shape ``(n_problems, len(Z))``.  Nothing changes when
    ``len(Z) <= budget``."""
    coef = np.asarray(coef, dtype=np.float64)
    n = Z.shape[0]
    if int(budget) < 1:
        raise ValueError(f"budget must be >= 1, got {budget!r}")
    if n <= budget:
        return np.arange(n, dtype=np.int64), coef
    keep = np.sort(np.random.default_rng(seed).choice(n, int(budget), replace=False))
    ZB = Z[keep]
    rhs = kernel_combination(kernel, ZB, Z, coef.T)  # K_ZS c, (budget, n_problems)
    K = kernel_matrix(kernel, ZB)
    scale = float(np.mean(kernel_diag(kernel, ZB))) or 1.0
    jitter = JITTER
    while True:
        A = K.copy()
        A[np.diag_indices_from(A)] += jitter * scale
        try:
            b = cho_solve(cho_factor(A, lower=True, overwrite_a=True), rhs)
            break
        except LinAlgError:
            if jitter >= JITTER_MAX:
                raise
            jitter *= JITTER_STEP
    return keep.astype(np.int64), np.ascontiguousarray(b.T)
