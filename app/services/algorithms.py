"""Algorithm names of ``POST /train`` -> scikit-learn estimators.

"sodm" and "odm" are the solver's ``SODMClassifier`` / ``ODMClassifier``. The paper's
baselines ("cascade" Ca-ODM, "dip" DiP-ODM, "dc" DC-ODM, "svrg" ODM-SVRG) are functions in
``solver.baselines``; the thin estimators below run them through the shared estimator
machinery (scaling, intercept column, one-vs-rest, ``should_stop``), so their models are
ordinary kernel / linear ODM models. ``portable(est)`` re-labels a fitted baseline as an
``ODMClassifier`` with the same kernel and ODM parameters for the model file (the model
file format knows the solver's two estimators only; predictions are identical).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from solver import ODMClassifier, SODMClassifier
from solver.estimators import _is_int, _is_real, _ODMBase, _require

BASELINES = ("cascade", "dip", "dc", "svrg")

# Fitted attributes that define a model (copied by ``portable``).
_FITTED = ("classes_", "n_features_in_", "_scaler", "gamma_", "history_", "fit_info_",
           "n_iter_", "w_", "_svz", "support_vectors_", "dual_coef_", "support_",
           "n_support_")


class _KernelBaseline(_ODMBase):
    """A hierarchical baseline: ``_fn(X, y, kernel, params, **options) -> SODMResult``."""

    _options: tuple[str, ...] = ()

    def _common(self, kernel: str, gamma: Any, degree: int, coef0: float, lam: float,
                upsilon: float, theta: float, warm_start: str, n_jobs: int | None,
                tol: float, max_iter: int, cache_size: float, fit_intercept: bool,
                scale: bool, random_state: Any) -> None:
        self.kernel, self.gamma, self.degree, self.coef0 = kernel, gamma, degree, coef0
        self.lam, self.upsilon, self.theta = lam, upsilon, theta
        self.warm_start, self.n_jobs = warm_start, n_jobs
        self.tol, self.max_iter, self.cache_size = tol, max_iter, cache_size
        self.fit_intercept, self.scale, self.random_state = fit_intercept, scale, random_state

    def _validate_extra_params(self) -> None:
        _require(self.warm_start in ("rescale", "literal"), "warm_start", self.warm_start,
                 "'rescale' or 'literal'")
        _require(self.n_jobs is None or (_is_int(self.n_jobs) and self.n_jobs != 0), "n_jobs",
                 self.n_jobs, "None or a non-zero int")
        for name in self._options:
            v = getattr(self, name)
            _require(_is_int(v) and v >= (0 if name == "levels" else 1), name, v,
                     "int >= 0" if name == "levels" else "int >= 1")

    def _algorithm_for_kernel(self) -> str:
        return self._algorithm_name

    @staticmethod
    def _fn():  # pragma: no cover - overridden
        raise NotImplementedError

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop):
        opts = {name: int(getattr(self, name)) for name in self._options}
        res = self._fn()(Z, y, kernel, params, warm_start=self.warm_start,
                         n_jobs=1 if self.n_jobs is None else int(self.n_jobs),
                         tol=float(self.tol), max_iter=int(self.max_iter),
                         cache_size=float(self.cache_size), random_state=seed, X_val=Z_val,
                         y_val=y_val, progress=progress, should_stop=should_stop, **opts)
        return ("alpha", np.asarray(res.alpha, dtype=np.float64), list(res.history),
                bool(res.stopped))


class CascadeODMClassifier(_KernelBaseline):
    """Ca-ODM: a binary cascade over ``2**levels`` random balanced partitions."""

    _algorithm_name = "cascade"
    _options = ("levels",)

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1000.0, upsilon: float = 0.5,
                 theta: float = 0.2, levels: int = 3, warm_start: str = "rescale",
                 n_jobs: int | None = 1, tol: float = 1e-3, max_iter: int = 1000,
                 cache_size: float = 512.0, fit_intercept: bool = True, scale: bool = True,
                 random_state=None) -> None:
        self._common(kernel, gamma, degree, coef0, lam, upsilon, theta, warm_start, n_jobs,
                     tol, max_iter, cache_size, fit_intercept, scale, random_state)
        self.levels = levels

    @staticmethod
    def _fn():
        from solver.baselines import ca_odm

        return ca_odm


class DiPODMClassifier(_KernelBaseline):
    """DiP-ODM: a cascade over k-means-stratified partitions."""

    _algorithm_name = "dip"
    _options = ("levels", "n_clusters")

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1000.0, upsilon: float = 0.5,
                 theta: float = 0.2, levels: int = 3, n_clusters: int = 20,
                 warm_start: str = "rescale", n_jobs: int | None = 1, tol: float = 1e-3,
                 max_iter: int = 1000, cache_size: float = 512.0, fit_intercept: bool = True,
                 scale: bool = True, random_state=None) -> None:
        self._common(kernel, gamma, degree, coef0, lam, upsilon, theta, warm_start, n_jobs,
                     tol, max_iter, cache_size, fit_intercept, scale, random_state)
        self.levels = levels
        self.n_clusters = n_clusters

    @staticmethod
    def _fn():
        from solver.baselines import dip_odm

        return dip_odm


class DCODMClassifier(_KernelBaseline):
    """DC-ODM: kernel k-means partitions with a final warm-started global solve."""

    _algorithm_name = "dc"
    _options = ("levels", "fanout", "sample_size")

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1000.0, upsilon: float = 0.5,
                 theta: float = 0.2, levels: int = 2, fanout: int = 4, sample_size: int = 2000,
                 warm_start: str = "rescale", n_jobs: int | None = 1, tol: float = 1e-3,
                 max_iter: int = 1000, cache_size: float = 512.0, fit_intercept: bool = True,
                 scale: bool = True, random_state=None) -> None:
        self._common(kernel, gamma, degree, coef0, lam, upsilon, theta, warm_start, n_jobs,
                     tol, max_iter, cache_size, fit_intercept, scale, random_state)
        self.levels = levels
        self.fanout = fanout
        self.sample_size = sample_size

    @staticmethod
    def _fn():
        from solver.baselines import dc_odm

        return dc_odm


class SVRGODMClassifier(_ODMBase):
    """ODM-SVRG: single-machine SVRG on the linear ODM primal (kernel "linear" only)."""

    _algorithm_name = "svrg"

    def __init__(self, *, kernel: str = "linear", lam: float = 1000.0, upsilon: float = 0.5,
                 theta: float = 0.2, epochs: int | None = None, step_size: float | None = None,
                 inner_steps: int | None = None, tol: float = 1e-6,
                 fit_intercept: bool = True, scale: bool = True, random_state=None) -> None:
        self.kernel = kernel
        self.lam, self.upsilon, self.theta = lam, upsilon, theta
        self.epochs, self.step_size, self.inner_steps = epochs, step_size, inner_steps
        self.tol = tol
        self.fit_intercept, self.scale, self.random_state = fit_intercept, scale, random_state
        # fixed: the shared validation and the linear model need them
        self.gamma, self.degree, self.coef0 = "scale", 3, 1.0
        self.max_iter, self.cache_size = 1, 1.0

    def _validate_extra_params(self) -> None:
        _require(self.kernel == "linear", "kernel", self.kernel, "'linear' (ODM-SVRG is a "
                 "linear solver)")
        for name in ("epochs", "inner_steps"):
            v = getattr(self, name)
            _require(v is None or (_is_int(v) and v >= 1), name, v, "None or int >= 1")
        _require(self.step_size is None or (_is_real(self.step_size) and self.step_size > 0),
                 "step_size", self.step_size, "None or a positive number")

    def _algorithm_for_kernel(self) -> str:
        return "svrg"

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop):
        from solver.baselines import odm_svrg

        res = odm_svrg(Z, y, params, epochs=self.epochs, step_size=self.step_size,
                       inner_steps=self.inner_steps, tol=float(self.tol), random_state=seed,
                       X_val=Z_val, y_val=y_val, progress=progress, should_stop=should_stop)
        return ("w", np.asarray(res.w, dtype=np.float64).ravel(), list(res.history),
                bool(res.stopped))


ESTIMATORS: dict[str, type] = {
    "sodm": SODMClassifier,
    "odm": ODMClassifier,
    "cascade": CascadeODMClassifier,
    "dip": DiPODMClassifier,
    "dc": DCODMClassifier,
    "svrg": SVRGODMClassifier,
}


def portable(est: Any) -> Any:
    """The estimator to write to a model file: itself for ODM/SODM, else an equivalent
    fitted ``ODMClassifier`` (same kernel, ODM parameters, scaling and solution)."""
    if isinstance(est, ODMClassifier | SODMClassifier):
        return est
    shared = {k: v for k, v in est.get_params(deep=False).items()
              if k in ODMClassifier().get_params(deep=False)
              and k not in ("tol", "max_iter", "cache_size")}
    out = ODMClassifier(**shared)
    for name in _FITTED:
        setattr(out, name, getattr(est, name))
    return out
