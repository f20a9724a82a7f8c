"""scikit-learn estimators for the benchmark baselines of ``solver.baselines``.

Same preprocessing, labels, one-vs-rest, fitted state, model files and callbacks as
``ODMClassifier`` / ``SODMClassifier`` (see ``solver.estimators``); only the training
algorithm differs: Ca-ODM (cascade), DiP-ODM (k-means-preserving partitions), DC-ODM (kernel
k-means partitions + a warm-started global solve) and single-machine ODM-SVRG (linear).
``ESTIMATORS`` maps the service's algorithm names to the classes. The stored duals are the
baseline's own output (no rescaling).
"""

from __future__ import annotations

import numpy as np

from solver.estimators import ODMBase, is_int, is_real, require

__all__ = ["CascadeODMClassifier", "DiPODMClassifier", "DCODMClassifier", "SVRGODMClassifier",
           "ESTIMATORS"]


class _PartitionedBaseline(ODMBase):
    """Shared solve for the kernel baselines (they return ``SODMResult``)."""

    _function_name = ""
    _int_options: tuple[str, ...] = ()  # int >= 1 options besides ``levels``

    def _validate_extra_params(self) -> None:
        require(self.warm_start_scaling in ("rescale", "literal"), "warm_start_scaling",
                 self.warm_start_scaling, "'rescale' or 'literal'")
        require(self.n_jobs is None or (is_int(self.n_jobs) and self.n_jobs != 0), "n_jobs",
                 self.n_jobs, "None or a non-zero int")
        require(self.levels is None or (is_int(self.levels) and self.levels >= 0), "levels",
                 self.levels, "None or int >= 0")
        for name in self._int_options:
            v = getattr(self, name)
            require(is_int(v) and v >= 1, name, v, "int >= 1")

    def _algorithm_for_kernel(self) -> str:
        return self._algorithm_name

    def _extra_kwargs(self) -> dict:
        return {}

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop, sample_weight=None):
        import solver.baselines as baselines

        fn = getattr(baselines, self._function_name)
        opt = {"levels": self.levels} if self.levels is not None else {}
        n_jobs = 1 if self.n_jobs is None else int(self.n_jobs)
        res = fn(Z, y, kernel, params, warm_start=self.warm_start_scaling, n_jobs=n_jobs,
                 tol=float(self.tol), max_iter=int(self.max_iter),
                 cache_size=float(self.cache_size), random_state=seed, X_val=Z_val,
                 y_val=y_val, progress=progress, should_stop=should_stop,
                 sample_weight=sample_weight, **opt, **self._extra_kwargs())
        return "alpha", np.asarray(res.alpha, dtype=np.float64), list(res.history), \
            bool(res.stopped)


class CascadeODMClassifier(_PartitionedBaseline):
    """Ca-ODM: Cascade SVM (Graf et al. 2004) for ODM over ``2**levels`` random partitions."""

    _algorithm_name = "cascade"
    _function_name = "ca_odm"

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1e4, upsilon: float = 0.5,
                 theta: float = 0.2, levels: int | None = 3,
                 warm_start_scaling: str = "rescale",
                 n_jobs: int | None = 1, tol: float = 1e-3, max_iter: int = 1000,
                 cache_size: float = 512.0, fit_intercept: bool = True, scale: bool = True,
                 random_state=None, class_weight=None) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.lam = lam
        self.upsilon = upsilon
        self.theta = theta
        self.levels = levels
        self.warm_start_scaling = warm_start_scaling
        self.n_jobs = n_jobs
        self.tol = tol
        self.max_iter = max_iter
        self.cache_size = cache_size
        self.fit_intercept = fit_intercept
        self.scale = scale
        self.random_state = random_state
        self.class_weight = class_weight


class DiPODMClassifier(CascadeODMClassifier):
    """DiP-ODM: DiP-SVM (Singh et al. 2017) partitions that preserve k-means clusters."""

    _algorithm_name = "dip"
    _function_name = "dip_odm"
    _int_options = ("n_clusters",)

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1e4, upsilon: float = 0.5,
                 theta: float = 0.2, levels: int | None = 3, n_clusters: int = 20,
                 warm_start_scaling: str = "rescale", n_jobs: int | None = 1, tol: float = 1e-3,
                 max_iter: int = 1000, cache_size: float = 512.0, fit_intercept: bool = True,
                 scale: bool = True, random_state=None, class_weight=None) -> None:
        super().__init__(kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, lam=lam,
                         upsilon=upsilon, theta=theta, levels=levels,
                         warm_start_scaling=warm_start_scaling,
                         n_jobs=n_jobs, tol=tol, max_iter=max_iter, cache_size=cache_size,
                         fit_intercept=fit_intercept, scale=scale, random_state=random_state,
                         class_weight=class_weight)
        self.n_clusters = n_clusters

    def _extra_kwargs(self) -> dict:
        return {"n_clusters": int(self.n_clusters)}


class DCODMClassifier(CascadeODMClassifier):
    """DC-ODM: DC-SVM (Hsieh et al. 2014) kernel k-means partitions, then a global solve."""

    _algorithm_name = "dc"
    _function_name = "dc_odm"
    _int_options = ("fanout", "sample_size")

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1e4, upsilon: float = 0.5,
                 theta: float = 0.2, levels: int | None = 2, fanout: int = 4,
                 sample_size: int = 2000, warm_start_scaling: str = "rescale",
                 n_jobs: int | None = 1,
                 tol: float = 1e-3, max_iter: int = 1000, cache_size: float = 512.0,
                 fit_intercept: bool = True, scale: bool = True, random_state=None,
                 class_weight=None) -> None:
        super().__init__(kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, lam=lam,
                         upsilon=upsilon, theta=theta, levels=levels,
                         warm_start_scaling=warm_start_scaling,
                         n_jobs=n_jobs, tol=tol, max_iter=max_iter, cache_size=cache_size,
                         fit_intercept=fit_intercept, scale=scale, random_state=random_state,
                         class_weight=class_weight)
        self.fanout = fanout
        self.sample_size = sample_size

    def _extra_kwargs(self) -> dict:
        return {"fanout": int(self.fanout), "sample_size": int(self.sample_size)}


class SVRGODMClassifier(ODMBase):
    """ODM-SVRG: single-machine SVRG (Johnson & Zhang 2013) on the linear ODM primal.

    Only the linear kernel (``kernel="linear"`` is the only accepted value); ``epochs``,
    ``step_size`` and ``inner_steps`` default (None) to ``solver.baselines.svrg``'s choices.
    """

    _algorithm_name = "svrg"

    def __init__(self, *, kernel: str = "linear", lam: float = 1e4, upsilon: float = 0.5,
                 theta: float = 0.2, epochs: int | None = None, step_size: float | None = None,
                 inner_steps: int | None = None, tol: float = 1e-6,
                 fit_intercept: bool = True, scale: bool = True, random_state=None,
                 class_weight=None) -> None:
        self.kernel = kernel
        self.lam = lam
        self.upsilon = upsilon
        self.theta = theta
        self.epochs = epochs
        self.step_size = step_size
        self.inner_steps = inner_steps
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.scale = scale
        self.random_state = random_state
        self.class_weight = class_weight

    # The shared kernel plumbing reads these; a linear model ignores them.
    gamma = "scale"
    degree = 3
    coef0 = 1.0

    def _validate_extra_params(self) -> None:
        require(self.kernel == "linear", "kernel", self.kernel, "'linear' (ODM-SVRG is a "
                 "linear solver)")
        for name in ("epochs", "inner_steps"):
            v = getattr(self, name)
            require(v is None or (is_int(v) and v >= 1), name, v, "None or int >= 1")
        require(self.step_size is None or (is_real(self.step_size) and self.step_size > 0),
                 "step_size", self.step_size, "None or a positive number")

    def _algorithm_for_kernel(self) -> str:
        return "svrg"

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop, sample_weight=None):
        from solver.baselines import odm_svrg

        opt = {k: getattr(self, k) for k in ("epochs", "step_size", "inner_steps")
               if getattr(self, k) is not None}
        res = odm_svrg(Z, y, params, tol=float(self.tol), random_state=seed, X_val=Z_val,
                       y_val=y_val, progress=progress, should_stop=should_stop,
                       sample_weight=sample_weight, **opt)
        return "w", np.asarray(res.w, dtype=np.float64).ravel(), list(res.history), \
            bool(res.stopped)


ESTIMATORS: dict[str, type[ODMBase]] = {
    "cascade": CascadeODMClassifier,
    "dip": DiPODMClassifier,
    "dc": DCODMClassifier,
    "svrg": SVRGODMClassifier,
}
