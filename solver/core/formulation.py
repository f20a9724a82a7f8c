"""The ODM optimisation problem in the SODM paper's convention (Wang et al., IJCAI-23).

Primal (M instances, feature map phi, no bias term)::

    min_w  1/2 ||w||^2 + lam/(2M) * sum_i (xi_i^2 + upsilon * eps_i^2) / (1 - theta)^2
    s.t.   1 - theta - xi_i <= y_i w.phi(x_i) <= 1 + theta + eps_i

Dual (a minimisation of the negated Lagrange dual; strong duality gives p* = -d*)::

    min_{zeta, beta >= 0}  1/2 (zeta-beta)' Q (zeta-beta) + (M c/2)(upsilon ||zeta||^2 + ||beta||^2)
                           + (theta-1) 1'zeta + (theta+1) 1'beta
    Q_ij = y_i y_j k(x_i, x_j),   c = (1-theta)^2 / (lam upsilon)

i.e. the box QP ``1/2 a'Ha + b'a`` with ``H = [[Q + M c upsilon I, -Q], [-Q, Q + M c I]]`` and
``b = [(theta-1)1; (theta+1)1]``.  Dual variables are stored per instance as an ``(m, 2)`` array
``alpha[:, 0] = zeta`` (lower band constraint), ``alpha[:, 1] = beta`` (upper).  The primal
solution is ``w = sum_i y_i (zeta_i - beta_i) phi(x_i)`` and the KKT conditions give
``xi = M(1-theta)^2 zeta / lam`` and ``eps = M(1-theta)^2 beta / (lam upsilon)``.

``M`` in the ``M c`` term is the *problem's own size* (``m_scale``); SODM's local problems pass
their partition size, which is exactly the ODM of that partition's data.

Instance weights ``c_i > 0`` (``sample_weight``, ``class_weight``) multiply instance i's loss::

    min_w  1/2 ||w||^2 + lam/(2M) * sum_i c_i (xi_i^2 + upsilon * eps_i^2) / (1 - theta)^2

with ``M = sum_i c_i``.  The Lagrangian's stationarity in ``xi_i`` gives
``xi_i = M (1-theta)^2 zeta_i / (lam c_i)`` (``eps_i`` likewise with ``upsilon``), so in the dual
only the diagonal changes: instance i adds ``M c upsilon / c_i`` (zeta) and ``M c / c_i``
(beta) to H, i.e. its diagonal regularizer scales by ``1 / c_i`` (:func:`diag_vectors`).  An
integer weight k is the same problem as k copies of the row: the copies' duals sum to the
weighted row's (same ``M``, same H restricted to the sums), so the optimal ``w`` is equal.

Relation to the ODM journal paper / libodm (Zhang & Zhou): their primal weights the loss by
``lambda/m`` instead of ``lam/(2M)`` and calls ``upsilon`` ``mu``, so
``lambda_journal = lam / 2``, ``mu = upsilon`` and ``theta`` is the same
(see :func:`to_journal_params` / :func:`from_journal_params`).  The authors' Scala code uses the
journal's scaling as well (its ``lambda`` is half of ours).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solver.exceptions import InvalidParameterError as Bad

__all__ = [
    "ODMParams",
    "diag_vectors",
    "check_weights",
    "default_scale",
    "dual_gradient",
    "dual_objective",
    "kkt_violation_from_grad",
    "primal_objective_linear",
    "primal_objective_from_margins",
    "margin_loss",
    "objective_from_loss",
    "primal_gradient_linear",
    "instance_gradients_linear",
    "slacks_from_alpha",
    "lipschitz_constant",
    "to_journal_params",
    "from_journal_params",
]


# decades either side of 1 that ODMParams' derived constants may span (``_check_scale``)
MAX_DECADES = 200


@dataclass(frozen=True)
class ODMParams:
    """ODM hyperparameters in the SODM paper's convention.

    ``lam`` > 0 weights the squared-deviation loss against ``1/2 ||w||^2``; ``upsilon`` > 0
    weights deviations above ``1 + theta`` (the paper's proofs assume ``upsilon <= 1``, larger
    values are accepted); ``theta`` in [0, 1) is the half-width of the zero-loss band.
    """

    lam: float = 1.0
    upsilon: float = 0.5
    theta: float = 0.2

    def validate(self) -> ODMParams:
        """Raise ``InvalidParameterError`` naming the offending parameter; return ``self``."""
        for name in ("lam", "upsilon", "theta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating):
                raise Bad(name, f"{name} must be a real number, got {v!r}")
            if not math.isfinite(float(v)):
                raise Bad(name, f"{name} must be finite, got {v!r}")
        if self.lam <= 0:
            raise Bad("lam", f"lam must be > 0, got {self.lam!r}")
        if self.upsilon <= 0:
            raise Bad("upsilon", f"upsilon must be > 0, got {self.upsilon!r}")
        if not 0 <= self.theta < 1:
            raise Bad("theta", f"theta must be in [0, 1), got {self.theta!r}")
        self._check_scale()
        return self

    def _check_scale(self) -> None:
        """``c`` and the SVRG smoothness factor ``lam max(1, upsilon) / (1-theta)^2`` within
        ``10^+-MAX_DECADES`` (their products with the data stay finite float64)."""
        lam, ups, band = math.log10(self.lam), math.log10(self.upsilon), \
            2 * math.log10(1.0 - self.theta)
        log_c = band - lam - ups
        if abs(log_c) > MAX_DECADES:
            name = ("lam" if lam <= ups else "upsilon") if log_c > 0 \
                else ("lam" if lam >= ups else "upsilon")
            raise Bad(name, f"{name} is out of range: lam={self.lam!r} and upsilon="
                      f"{self.upsilon!r} make c = (1-theta)^2 / (lam upsilon) = 1e{log_c:.0f}, "
                      f"outside 1e-{MAX_DECADES}..1e{MAX_DECADES}")
        if lam + max(0.0, ups) - band > MAX_DECADES:
            name = "lam" if lam >= ups else "upsilon"
            raise Bad(name, f"{name} is out of range: lam max(1, upsilon) / (1-theta)^2 = "
                      f"1e{lam + max(0.0, ups) - band:.0f}, above 1e{MAX_DECADES}")

    @property
    def c(self) -> float:
        """The dual's constant ``c = (1 - theta)^2 / (lam * upsilon)``."""
        return (1.0 - self.theta) ** 2 / (self.lam * self.upsilon)

    def diag_terms(self, m_scale: float) -> tuple[float, float]:
        """``(M c upsilon, M c)``: what the zeta and beta blocks add to the diagonal of H."""
        mc = float(m_scale) * self.c
        return mc * self.upsilon, mc


def check_weights(sample_weight, m: int, *, allow_zero: bool = False) -> np.ndarray | None:
    """``sample_weight`` as a float64 array of length ``m`` (None stays None).

    Raises ``ValueError`` naming ``sample_weight`` for a wrong shape and for weights that are
    not finite, negative, or zero (zero only when ``allow_zero``; the estimators drop
    zero-weight rows before solving, as scikit-learn does)."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.ndim != 1 or w.shape[0] != m:
        raise ValueError(f"sample_weight must have shape ({m},), got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("sample_weight must be finite (no NaN or infinity)")
    if np.any(w < 0):
        raise ValueError(f"sample_weight must be >= 0, got {float(w.min())!r}")
    if not allow_zero and np.any(w == 0):
        raise ValueError("sample_weight must be > 0 (a zero weight drops the row: remove it)")
    return w


def diag_vectors(params: ODMParams, m_scale: float, m: int,
                 sample_weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-instance ``(M c upsilon / c_i, M c / c_i)``: the dual diagonal of each instance
    (constant without weights), as the compiled solvers take it."""
    dz, db = params.diag_terms(m_scale)
    if sample_weight is None:
        return np.full(m, dz), np.full(m, db)
    inv = 1.0 / np.asarray(sample_weight, dtype=np.float64)
    return dz * inv, db * inv


def default_scale(m: int, sample_weight: np.ndarray | None) -> float:
    """The ``M`` of a problem: its rows, or the sum of their weights."""
    return float(m if sample_weight is None else np.sum(sample_weight))


def to_journal_params(params: ODMParams) -> dict[str, float]:
    """Convert to the ODM journal / libodm convention: ``lambda = lam/2``, ``mu = upsilon``."""
    return {"lambda": params.lam / 2.0, "mu": params.upsilon, "theta": params.theta}


def from_journal_params(lam_journal: float, mu: float, theta: float) -> ODMParams:
    """Inverse of :func:`to_journal_params` (journal ``lambda`` weights the loss by lambda/m)."""
    return ODMParams(lam=2.0 * float(lam_journal), upsilon=float(mu), theta=float(theta))


def _as_alpha(alpha) -> np.ndarray:
    a = np.asarray(alpha, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"alpha must have shape (m, 2), got {a.shape}")
    return a


def _margins_u(Q_or_u, alpha: np.ndarray) -> np.ndarray:
    """``u = Q (zeta - beta)`` from either the m x m matrix Q or u itself."""
    if sp.issparse(Q_or_u) or np.ndim(Q_or_u) == 2:
        return np.asarray(Q_or_u @ (alpha[:, 0] - alpha[:, 1]), dtype=np.float64).ravel()
    u = np.asarray(Q_or_u, dtype=np.float64).ravel()
    if u.shape[0] != alpha.shape[0]:
        raise ValueError("u and alpha have different lengths")
    return u


def dual_objective(Q_or_u, alpha, params: ODMParams, m: float | None = None,
                   sample_weight: np.ndarray | None = None) -> float:
    """Dual objective ``d(zeta, beta)`` (to be minimised).

    ``Q_or_u`` is either the m x m matrix ``Q = Y K Y`` or the vector ``u = Q (zeta - beta)``
    (the solvers maintain u, so the objective costs O(m)).  ``m`` is the ``M`` of the ``M c``
    term, by default ``len(alpha)`` (the weights' sum with ``sample_weight``).
    """
    a = _as_alpha(alpha)
    m = default_scale(a.shape[0], sample_weight) if m is None else m
    u = _margins_u(Q_or_u, a)
    dz, db = diag_vectors(params, m, a.shape[0], sample_weight)
    z, b = a[:, 0], a[:, 1]
    return float(
        0.5 * np.dot(z - b, u) + 0.5 * (np.dot(dz * z, z) + np.dot(db * b, b))
        + (params.theta - 1.0) * z.sum() + (params.theta + 1.0) * b.sum()
    )


def dual_gradient(Q_or_u, alpha, params: ODMParams, m: float | None = None,
                  sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Gradient ``H alpha + b`` of the dual, per instance as an ``(m, 2)`` array."""
    a = _as_alpha(alpha)
    m = default_scale(a.shape[0], sample_weight) if m is None else m
    u = _margins_u(Q_or_u, a)
    dz, db = diag_vectors(params, m, a.shape[0], sample_weight)
    g = np.empty_like(a)
    g[:, 0] = u + dz * a[:, 0] + (params.theta - 1.0)
    g[:, 1] = -u + db * a[:, 1] + (params.theta + 1.0)
    return g


def kkt_violation_from_grad(grad, alpha) -> float:
    """Max projected-gradient violation of the box ``alpha >= 0``.

    For a coordinate above zero the projected gradient is the gradient itself, at zero it is
    ``min(g, 0)``; the optimum is where every projected gradient vanishes.
    """
    g = np.asarray(grad, dtype=np.float64)
    a = np.asarray(alpha, dtype=np.float64)
    if g.size == 0:
        return 0.0
    pg = np.where(a > 0, np.abs(g), np.maximum(-g, 0.0))
    return float(pg.max())


def slacks_from_alpha(alpha, params: ODMParams, m: float | None = None) -> tuple[np.ndarray,
                                                                                  np.ndarray]:
    """KKT closed forms ``xi = M(1-theta)^2 zeta / lam``, ``eps = M(1-theta)^2 beta/(lam ups)``."""
    a = _as_alpha(alpha)
    m = a.shape[0] if m is None else m
    s = m * (1.0 - params.theta) ** 2 / params.lam
    return s * a[:, 0], s * a[:, 1] / params.upsilon


def _margins(w, X, y) -> np.ndarray:
    return np.asarray(y, dtype=np.float64) * np.asarray(X @ np.asarray(w, np.float64)).ravel()


def primal_objective_linear(w, X, y, params: ODMParams, m_scale: float | None = None) -> float:
    """Primal objective ``p(w)`` for the linear kernel (slacks at their optimal values)."""
    return primal_objective_from_margins(w, _margins(w, X, y), params, m_scale)


def margin_loss(margins, params: ODMParams, sample_weight: np.ndarray | None = None) -> float:
    """The ODM loss ``sum_i c_i (xi_i^2 + upsilon eps_i^2)`` of the margins ``y_i w.x_i``
    (their deviations below / above the band ``[1-theta, 1+theta]``; ``c_i = 1`` without
    weights)."""
    gam = np.asarray(margins, dtype=np.float64)
    xi = np.maximum(0.0, 1.0 - params.theta - gam)
    eps = np.maximum(0.0, gam - 1.0 - params.theta)
    per = xi * xi + params.upsilon * eps * eps
    return float(per.sum() if sample_weight is None else np.dot(sample_weight, per))


def objective_from_loss(w, loss: float, params: ODMParams, m: float) -> float:
    """``p(w) = 1/2 ||w||^2 + lam/(2m) loss / (1-theta)^2`` from :func:`margin_loss`."""
    w = np.asarray(w, dtype=np.float64)
    return float(0.5 * np.dot(w, w) + params.lam / (2.0 * m) * loss / (1.0 - params.theta) ** 2)


def primal_objective_from_margins(w, margins, params: ODMParams,
                                  m_scale: float | None = None,
                                  sample_weight: np.ndarray | None = None) -> float:
    """``p(w)`` from the margins ``y_i w.x_i`` when they are already known."""
    gam = np.asarray(margins, dtype=np.float64)
    m = default_scale(gam.shape[0], sample_weight) if m_scale is None else m_scale
    return objective_from_loss(w, margin_loss(gam, params, sample_weight), params, m)


def instance_gradients_linear(w, X, y, params: ODMParams, idx=None) -> np.ndarray:
    """Per-instance gradients ``grad p_i(w)`` (DiODM form, with the 1/(1-theta)^2 factor).

    ``p(w) = (1/M) sum_i p_i(w)`` with ``p_i(w) = 1/2||w||^2 + lam/(2(1-theta)^2)
    (xi_i^2 + upsilon eps_i^2)``.  Returns a dense ``(len(idx), n)`` array (rows of X selected
    by ``idx``, all rows by default).
    """
    w = np.asarray(w, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64)
    if idx is not None:
        X, y = X[idx], y[idx]
    gam = _margins(w, X, y)
    coef = _instance_coef(gam, y, params)
    G = np.tile(w, (gam.shape[0], 1))
    if sp.issparse(X):
        G += sp.diags(coef) @ X
        return np.asarray(G)
    G += coef[:, None] * np.asarray(X, dtype=np.float64)
    return G


def _instance_coef(gam: np.ndarray, y: np.ndarray, params: ODMParams) -> np.ndarray:
    """The data-term coefficient of ``y_i x_i`` in ``grad p_i``, already multiplied by y_i."""
    th = params.theta
    s = params.lam / (1.0 - th) ** 2
    lo = np.where(gam < 1.0 - th, gam + th - 1.0, 0.0)
    hi = np.where(gam > 1.0 + th, params.upsilon * (gam - th - 1.0), 0.0)
    return s * (lo + hi) * y


def primal_gradient_linear(w, X, y, params: ODMParams, m_scale: float | None = None) -> np.ndarray:
    """Full primal gradient ``grad p(w) = (1/M) sum_i grad p_i(w)``, computed without forming
    the per-instance gradients (O(nnz))."""
    w = np.asarray(w, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64)
    gam = _margins(w, X, y)
    m = gam.shape[0] if m_scale is None else m_scale
    coef = _instance_coef(gam, y, params)
    return w + np.asarray(X.T @ coef).ravel() / m


def lipschitz_constant(X, params: ODMParams, sample_weight: np.ndarray | None = None) -> float:
    """Largest per-instance smoothness constant ``L_i = 1 + lam max(1, upsilon) ||x_i||^2 /
    (1-theta)^2`` (the data term times ``sample_weight_i`` when given); each ``p_i`` is also
    1-strongly convex.  SVRG step sizes are ~0.1 / L."""
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    else:
        Xd = np.asarray(X, dtype=np.float64)
        sq = np.einsum("ij,ij->i", Xd, Xd)
    if sample_weight is not None:
        sq = sq * np.asarray(sample_weight, dtype=np.float64)
    r2 = float(sq.max()) if sq.size else 0.0
    return 1.0 + params.lam * max(1.0, params.upsilon) * r2 / (1.0 - params.theta) ** 2
