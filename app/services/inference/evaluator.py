"""Decision values of a loaded model for a block of rows, at BLAS speed and without checks.

``ServingModel`` is built once per loaded model: the support vectors in the solver's space
as one C-contiguous float64 matrix, their squared norms, the coefficients as ``(n_sv, k)``
and, for a linear kernel, the primal weights ``Z' coef``. ``decision`` then scales the rows
(the model's own scaler), forms the inner products of a block of rows with every support
vector in one BLAS product into a buffer kept per thread, and turns them into kernel values
summed against the coefficients in one compiled pass (``solver.core._numba_kernels``), never
storing the kernel matrix; RBF rows of a few features skip the inner products
(``solver.kernel_sums.add_rbf_sums_from_points``). The rows are validated before they get here
(``app.services.inference.instances``).

Sparse rows or sparse support vectors go through the estimator's own
``decision_function`` (scipy's sparse products).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

# inner products computed per block: rows x support vectors <= this many float64 (8 MiB)
BLOCK_ELEMS = 1 << 20

_local = threading.local()


def _buffer(n: int) -> np.ndarray:
    buf = getattr(_local, "buf", None)
    if buf is None or buf.size < n:
        buf = np.empty(max(n, BLOCK_ELEMS), dtype=np.float64)
        _local.buf = buf
    return buf[:n]


class ServingModel:
    """A fitted estimator prepared for repeated prediction."""

    def __init__(self, est: Any) -> None:
        from solver import kernel_sums

        self.est = est
        self.classes = np.asarray(est.classes_)
        self.n_features = int(est.n_features_in_)
        self.kernel = str(getattr(est, "kernel", "linear"))
        svz = getattr(est, "_svz", None)
        self.w: np.ndarray | None = None
        self.sv: np.ndarray | None = None
        self.svT: np.ndarray | None = None
        if getattr(est, "w_", None) is not None:
            self.w = np.ascontiguousarray(np.asarray(est.w_, dtype=np.float64).T)
        elif svz is not None and not sp.issparse(svz):
            coef = np.ascontiguousarray(np.asarray(est.dual_coef_, dtype=np.float64).T)
            sv = np.ascontiguousarray(svz, dtype=np.float64)
            if self.kernel == "linear":
                self.w = np.ascontiguousarray(sv.T @ coef)
            else:
                self.sv, self.coef = sv, coef
                self.sb = np.einsum("ij,ij->i", sv, sv)
                # few features: kernel values straight from the points (solver.kernel_sums)
                self.svT = np.ascontiguousarray(sv.T) if self.kernel == "rbf" and \
                    1 <= sv.shape[1] <= kernel_sums.DIRECT_RBF_MAX_FEATURES else None
                self.gamma = float(est.gamma_)
                self.degree = int(est.degree)
                self.coef0 = float(est.coef0)
        self.n_support_vectors = 0 if svz is None else int(svz.shape[0])

    def decision(self, X: np.ndarray | sp.csr_matrix) -> np.ndarray:
        """``(n, k)`` decision values (k = 1 for two classes)."""
        if sp.issparse(X) or (self.w is None and self.sv is None):
            F = np.asarray(self.est.decision_function(X), dtype=np.float64)
            return F.reshape(F.shape[0], -1)
        Z = np.ascontiguousarray(self.est._model_space(X), dtype=np.float64)
        if self.w is not None:
            return Z @ self.w
        return self._kernel_sum(Z)

    def _kernel_sum(self, Z: np.ndarray) -> np.ndarray:
        sv, coef = self.sv, self.coef
        n, m = Z.shape[0], sv.shape[0]
        out = np.zeros((n, coef.shape[1]))
        if m == 0:
            return out
        from solver import kernel_sums

        if self.svT is not None:
            kernel_sums.add_rbf_sums_from_points(Z, self.svT, self.gamma, coef, out)
            return out
        sa = np.einsum("ij,ij->i", Z, Z)
        step = max(1, BLOCK_ELEMS // m)
        for s in range(0, n, step):
            e = min(n, s + step)
            G = _buffer((e - s) * m).reshape(e - s, m)
            np.dot(Z[s:e], sv.T, out=G)
            if self.kernel == "rbf":
                kernel_sums.add_rbf_sums(G, sa[s:e], self.sb, self.gamma, coef, out[s:e])
            else:
                kernel_sums.add_poly_sums(G, self.gamma, self.coef0, self.degree, coef,
                                          out[s:e])
        return out

    def labels(self, F: np.ndarray) -> list[Any]:
        """Predicted labels in the dataset's original label values."""
        idx = (F[:, 0] > 0).astype(np.intp) if len(self.classes) == 2 else np.argmax(F, axis=1)
        return self.classes[idx].tolist()
