"""The public ODM estimators, each an :class:`~solver.estimators._base.ODMBase` that declares
its parameters and solves one binary problem.

* :class:`ODMClassifier`: the exact ODM (dual coordinate descent, ``solver.exact`` and
  ``solver.linear``).
* :class:`SODMClassifier`: scalable ODM (Wang et al., IJCAI-23): Algorithm 1 (``solver/sodm/``)
  and Algorithm 2 (``solver.linear.dsvrg``).
* The benchmark baselines of ``solver.baselines``: :class:`CascadeODMClassifier` (Ca-ODM),
  :class:`DiPODMClassifier` (DiP-ODM), :class:`DCODMClassifier` (DC-ODM) and
  :class:`SVRGODMClassifier` (single-machine ODM-SVRG). Only the training algorithm differs;
  the stored duals are the baseline's own output (no rescaling). ``BASELINE_ESTIMATORS`` maps
  the service's algorithm names to these four classes.
"""

from __future__ import annotations

import time

import numpy as np

from solver.estimators._base import ODMBase, is_int, is_real, require

__all__ = ["ODMClassifier", "SODMClassifier", "CascadeODMClassifier", "DiPODMClassifier",
           "DCODMClassifier", "SVRGODMClassifier", "BASELINE_ESTIMATORS", "average_local_duals"]


class ODMClassifier(ODMBase):
    """Exact ODM: one dual coordinate descent solve on the whole training set.

    Kernel "linear" uses the LIBLINEAR-style solver that keeps w (O(nnz) per epoch), after a
    primal Newton solve when there are at most 1000 features; "rbf" and "poly" use the kernel
    solver with a bounded kernel cache of ``cache_size`` MB (its active-set Newton step may
    add a face factor in what the kernel leaves of 1.25 times that, at least a quarter of
    it, or of a 1,000-row face). ``tol`` is
    the stopping tolerance on the max projected-gradient (KKT) violation, ``max_iter`` the
    maximum number of epochs. ``max_support_vectors`` (kernel models; None: no budget) keeps
    at most that many support vectors, drawn at random (``random_state``), with the decision
    function projected onto their span in the kernel's feature space
    (:mod:`solver.exact.reduction`): smaller model files and faster predictions for a small loss
    of accuracy. The conventions are in ``solver.estimators``' docstring.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}, default="rbf"
        rbf ``exp(-gamma ||x - z||^2)``, poly ``(gamma x.z + coef0)^degree`` or linear
        ``x.z``.
    gamma : "scale", "auto" or float > 0, default="scale"
        Coefficient of the rbf and poly kernels. "scale": ``1 / (n_features *
        Var(X_scaled))`` on the scaled training features (1.0 when that variance is 0);
        "auto": chosen by ``fit`` (see ``lam``).
    degree : int >= 1, default=3
        Degree of the poly kernel.
    coef0 : float, default=1.0
        Constant term of the poly kernel.
    lam : float or "auto", default=1e4
        Weight of the mean squared deviation from the margin band (the paper's lambda; it
        plays the role of an SVM's ``C * M``). "auto" (also for ``gamma`` and ``theta``,
        each independently): chosen by k-fold CV with the exact solver on subsamples of the
        training rows before the final fit (``solver.auto.search``).
    upsilon : float, default=0.5
        Weight of the deviations above the band relative to those below (libodm's mu).
    theta : float or "auto", default=0.2
        Half-width of the margin band ``[1 - theta, 1 + theta]``: margins inside it cost
        nothing.
    tol : float > 0, default=1e-3
        Stopping tolerance on the largest projected-gradient (KKT) violation.
    max_iter : int >= 1, default=1000
        Most epochs of one coordinate-descent solve.
    cache_size : float > 0, default=512.0
        Megabytes of kernel cache of the kernel solver (its active-set Newton step may add a
        face factor in what the kernel leaves of 1.25 times that, at least a quarter of it,
        or of a 1,000-row face).
    shrinking : bool, default=True
        Shrink the active set of coordinate descent.
    fit_intercept : bool, default=True
        Append a constant feature 1 (as the authors' code does); False gives exactly the
        paper's model, which has no bias.
    scale : bool, default=True
        Min-max scale every feature to [0, 1] on the training data, inside the model
        (constant features map to 0).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choices: a binary problem gets it unchanged, one-vs-rest problem
        k a seed derived from it and k; None draws a fresh seed.
    probability : bool, default=False
        Fit Platt scaling on out-of-fold decision values, which enables ``predict_proba``
        (``solver.calibration``).
    max_support_vectors : int >= 1 or None, default=None
        Kernel models: keep at most this many support vectors, drawn at random, with the
        decision function projected onto their span (``solver.exact.reduction``); None keeps
        them all.
    class_weight : dict, "balanced" or None, default=None
        Multiplies the loss of each class's rows: ``{label: weight}`` (other labels 1) or
        "balanced" (``n_samples / (n_classes * bincount(y))``); combined by product with
        ``fit``'s ``sample_weight``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; for two classes ``classes_[1]`` is the positive one (y = +1).
        ``n_problems`` below is 1 for two classes, else ``n_classes`` (one-vs-rest).
    n_features_in_ : int
        Number of features seen by ``fit``.
    gamma_ : float
        The kernel coefficient used ("scale" and "auto" resolved).
    lam_ : float
        The ``lam`` used ("auto" resolved).
    theta_ : float
        The ``theta`` used ("auto" resolved).
    w_ : ndarray of shape (n_problems, n_features [+ 1]) or None
        Linear models: one weight row per problem, the intercept weight last when
        ``fit_intercept``; None for kernel models.
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features) or None
        Kernel models: the support vectors in the scaled feature space; None for linear
        models.
    dual_coef_ : ndarray of shape (n_problems, n_SV) or None
        Kernel models: ``y_j (zeta_j - beta_j)`` of each support vector per problem.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (linear models: of the rows outside some problem's
        band) in the rows given to ``fit``.
    n_support_ : ndarray of shape (n_problems,)
        Rows outside the band ``[1 - theta, 1 + theta]`` of each problem.
    n_iter_ : ndarray of shape (n_problems,)
        Coordinate-descent epochs of each problem.
    history_ : list of dict
        The solver's records (per level, epoch or problem).
    fit_info_ : dict
        What the fit did: algorithm, rows, seconds, seed, the parameters used, and the
        "auto" search (``fit_info_["auto"]``) and calibration records when there were any.
    platt_ : ndarray of shape (n_problems, 2) or None
        Platt scaling's (a, b) per problem when ``probability=True``, else None.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from solver.estimators import ODMClassifier
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = ODMClassifier(lam=1e3).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

    _algorithm_name = "odm"

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1e4, upsilon: float = 0.5,
                 theta: float = 0.2, tol: float = 1e-3, max_iter: int = 1000,
                 cache_size: float = 512.0, shrinking: bool = True, fit_intercept: bool = True,
                 scale: bool = True, random_state=None, probability: bool = False,
                 max_support_vectors: int | None = None, class_weight=None) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.lam = lam
        self.upsilon = upsilon
        self.theta = theta
        self.tol = tol
        self.max_iter = max_iter
        self.cache_size = cache_size
        self.shrinking = shrinking
        self.fit_intercept = fit_intercept
        self.scale = scale
        self.random_state = random_state
        self.probability = probability
        self.max_support_vectors = max_support_vectors
        self.class_weight = class_weight

    def _algorithm_for_kernel(self) -> str:
        return "odm-dcd-linear" if self.kernel == "linear" else "odm-dcd-kernel"

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop, sample_weight=None):
        t0 = time.perf_counter()
        if self.kernel == "linear":
            from solver.linear.dcd_linear import solve_linear_dual

            res = solve_linear_dual(Z, y, params, tol=float(self.tol),
                                    max_iter=int(self.max_iter), random_state=seed,
                                    shrinking=bool(self.shrinking), should_stop=should_stop,
                                    sample_weight=sample_weight)
            kind, sol = "w", np.asarray(res.w, dtype=np.float64).ravel()
        else:
            from solver.exact.dcd_kernel import solve_kernel_dual

            # the search's warm start along its lam path and kept kernel matrices (binary
            # problems only) and its CV fits' kernel dtype (solver.auto.search)
            start = getattr(self, "_dual_start", None)
            res = solve_kernel_dual(Z, y, kernel, params, tol=float(self.tol),
                                    alpha0=start if start is not None
                                    and start.shape == (Z.shape[0], 2) else None,
                                    max_iter=int(self.max_iter),
                                    cache_size=float(self.cache_size),
                                    shrinking=bool(self.shrinking), random_state=seed,
                                    should_stop=should_stop, sample_weight=sample_weight,
                                    kernel_memo=getattr(self, "_kernel_memo", None),
                                    kernel_dtype=getattr(self, "_kernel_dtype", None))
            kind, sol = "alpha", np.asarray(res.alpha, dtype=np.float64)
        record = {
            "n_iter": int(res.n_iter),
            "kkt_violation": float(res.kkt_violation),
            "objective": float(res.objective),
            "converged": bool(res.converged),
            "seconds": time.perf_counter() - t0,
            **({} if kind == "w" else res.newton.record()),
        }
        if Z_val is not None and y_val is not None and len(y_val):
            record["val_accuracy"] = _val_accuracy(kind, sol, Z, y, kernel, Z_val, y_val)
        if progress is not None and not res.stopped:
            progress(1.0, "exact ODM solved", record)
        return kind, sol, [record], bool(res.stopped)


# the "auto" search of every estimator cross-validates with the exact solver
ODMBase._cv_estimator = ODMClassifier


def _val_accuracy(kind, sol, Z, y, kernel, Z_val, y_val) -> float:
    if kind == "w":
        f = np.asarray(Z_val @ sol).ravel()
    else:
        from solver.core.kernels import kernel_matrix

        coef = y * (sol[:, 0] - sol[:, 1])
        sv = np.flatnonzero(coef != 0)
        if sv.size == 0:
            f = np.zeros(Z_val.shape[0])
        else:
            f = np.asarray(kernel_matrix(kernel, Z_val, Z[sv])) @ coef[sv]
    return float(np.mean(np.where(f > 0, 1.0, -1.0) == y_val))


class SODMClassifier(ODMBase):
    """Scalable ODM (SODM, Wang et al. IJCAI-23).

    Kernels "rbf"/"poly" (and "linear" with ``linear_solver="hierarchical"``) use Algorithm 1:
    ``p**levels`` stratified partitions (``n_strata`` strata around landmarks chosen in the
    kernel's feature space), solved in parallel (``n_jobs``) and merged ``p`` at a time with
    warm starts (``warm_start_scaling`` "rescale" or paper-"literal"; not scikit-learn's
    boolean ``warm_start``); ``final_global_solve`` adds one exact solve on the whole data
    warm-started from level 1 (true ODM optimum). Kernel
    "linear" uses Algorithm 2 by default (``linear_solver="dsvrg"``): distributed SVRG on the
    primal over ``n_partitions`` stratified partitions for ``epochs`` epochs with
    ``step_size`` (None: derived from the smoothness constant), stopping early when the
    gradient norm is ``tol`` times its value at 0 (``tol`` is the KKT tolerance of the
    kernel solvers). ``landmark_candidates``
    bounds the rows the kernel landmarks are chosen from. ``None`` for ``p``,
    ``levels``, ``n_strata``, ``landmark_candidates``, ``final_global_solve``,
    ``n_partitions`` and ``epochs`` means the solver module's documented default (``p``:
    the smallest merge factor whose level-1 partitions' float32 kernel fits ``cache_size``,
    see ``solver.sodm.hierarchy.default_p``; ``landmark_candidates``: 20,000).
    ``max_support_vectors`` is the support-vector budget of kernel models, as for
    ``ODMClassifier``.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}, default="rbf"
        rbf ``exp(-gamma ||x - z||^2)``, poly ``(gamma x.z + coef0)^degree`` or linear
        ``x.z``.
    gamma : "scale", "auto" or float > 0, default="scale"
        Coefficient of the rbf and poly kernels. "scale": ``1 / (n_features *
        Var(X_scaled))`` on the scaled training features (1.0 when that variance is 0);
        "auto": chosen by ``fit`` (see ``lam``).
    degree : int >= 1, default=3
        Degree of the poly kernel.
    coef0 : float, default=1.0
        Constant term of the poly kernel.
    lam : float or "auto", default=1e4
        Weight of the mean squared deviation from the margin band (the paper's lambda; it
        plays the role of an SVM's ``C * M``). "auto" (also for ``gamma`` and ``theta``,
        each independently): chosen by k-fold CV with the exact solver on subsamples of the
        training rows before the final fit (``solver.auto.search``).
    upsilon : float, default=0.5
        Weight of the deviations above the band relative to those below (libodm's mu).
    theta : float or "auto", default=0.2
        Half-width of the margin band ``[1 - theta, 1 + theta]``: margins inside it cost
        nothing.
    p : int >= 2 or None, default=None
        Merge factor: ``p`` partitions of a level form one of the next. None: the smallest
        ``p`` whose level-1 partitions' float32 kernel fits ``cache_size``
        (``solver.sodm.hierarchy.default_p``); after an "auto" search whose CV accuracy
        stopped rising (and ``levels`` None), partitions of about the rows where it
        stopped, at least 5,000 (``solver.sodm.hierarchy.plateau_p``).
    levels : int >= 0 or None, default=None
        Levels of the hierarchy (``p**levels`` stratified partitions at the finest). None:
        the fewest whose partitions' kernel fits ``cache_size``
        (``solver.sodm.hierarchy.default_levels``).
    n_strata : int >= 1 or None, default=None
        Strata, one per landmark chosen in the kernel's feature space, that every partition
        samples evenly. None: 50.
    landmark_candidates : int >= 1 or None, default=None
        Rows the landmarks are chosen among. None: 20,000.
    warm_start_scaling : {"rescale", "literal"}, default="rescale"
        How a level's duals warm-start the next: rescaled by the ratio of the old to the new
        problem size, or as the paper states them (not scikit-learn's boolean
        ``warm_start``).
    final_global_solve : bool or None, default=None
        End with one exact solve on all rows, warm-started from level 1 (the ODM optimum).
        None: no final solve (the paper's output).
    n_jobs : int != 0 or None, default=1
        Processes that solve the partitions of a level; -1: all cores; None: 1.
    tol : float > 0, default=1e-3
        Stopping tolerance on the largest projected-gradient (KKT) violation of the kernel
        solves; DSVRG stops when the gradient norm falls to ``tol`` times its value at 0.
    max_iter : int >= 1, default=1000
        Most epochs of one coordinate-descent solve.
    cache_size : float > 0, default=512.0
        Megabytes of kernel cache of a kernel solve.
    fit_intercept : bool, default=True
        Append a constant feature 1 (as the authors' code does); False gives exactly the
        paper's model, which has no bias.
    scale : bool, default=True
        Min-max scale every feature to [0, 1] on the training data, inside the model
        (constant features map to 0).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choices: a binary problem gets it unchanged, one-vs-rest problem
        k a seed derived from it and k; None draws a fresh seed.
    epochs : int >= 1 or None, default=None
        DSVRG epochs. None: 20.
    step_size : float in (0, 1) or None, default=None
        DSVRG step size. None: derived from the smoothness constant.
    n_partitions : int >= 1 or None, default=None
        DSVRG partitions. None: 8, but no partition under 2,000 rows.
    linear_solver : {"dsvrg", "hierarchical"}, default="dsvrg"
        The linear kernel's algorithm: Algorithm 2 (distributed SVRG on the primal over
        ``n_partitions`` stratified partitions) or Algorithm 1, as for the other kernels.
    probability : bool, default=False
        Fit Platt scaling on out-of-fold decision values, which enables ``predict_proba``
        (``solver.calibration``).
    max_support_vectors : int >= 1 or None, default=None
        Kernel models: keep at most this many support vectors, drawn at random, with the
        decision function projected onto their span (``solver.exact.reduction``); None keeps
        them all.
    class_weight : dict, "balanced" or None, default=None
        Multiplies the loss of each class's rows: ``{label: weight}`` (other labels 1) or
        "balanced" (``n_samples / (n_classes * bincount(y))``); combined by product with
        ``fit``'s ``sample_weight``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; for two classes ``classes_[1]`` is the positive one (y = +1).
        ``n_problems`` below is 1 for two classes, else ``n_classes`` (one-vs-rest).
    n_features_in_ : int
        Number of features seen by ``fit``.
    gamma_ : float
        The kernel coefficient used ("scale" and "auto" resolved).
    lam_ : float
        The ``lam`` used ("auto" resolved).
    theta_ : float
        The ``theta`` used ("auto" resolved).
    w_ : ndarray of shape (n_problems, n_features [+ 1]) or None
        Linear models: one weight row per problem, the intercept weight last when
        ``fit_intercept``; None for kernel models.
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features) or None
        Kernel models: the support vectors in the scaled feature space; None for linear
        models.
    dual_coef_ : ndarray of shape (n_problems, n_SV) or None
        Kernel models: ``y_j (zeta_j - beta_j)`` of each support vector per problem.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (linear models: of the rows outside some problem's
        band) in the rows given to ``fit``.
    n_support_ : ndarray of shape (n_problems,)
        Rows outside the band ``[1 - theta, 1 + theta]`` of each problem.
    n_iter_ : ndarray of shape (n_problems,)
        Levels solved (Algorithm 1) or epochs run (DSVRG) of each problem.
    history_ : list of dict
        The solver's records (per level, epoch or problem).
    fit_info_ : dict
        What the fit did: algorithm, rows, seconds, seed, the parameters used, and the
        "auto" search (``fit_info_["auto"]``) and calibration records when there were any.
    platt_ : ndarray of shape (n_problems, 2) or None
        Platt scaling's (a, b) per problem when ``probability=True``, else None.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from solver.estimators import SODMClassifier
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = SODMClassifier(p=2, levels=2, random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

    _algorithm_name = "sodm"

    def __init__(self, *, kernel: str = "rbf", gamma: float | str = "scale", degree: int = 3,
                 coef0: float = 1.0, lam: float = 1e4, upsilon: float = 0.5,
                 theta: float = 0.2, p: int | None = None, levels: int | None = None,
                 n_strata: int | None = None, landmark_candidates: int | None = None,
                 warm_start_scaling: str = "rescale",
                 final_global_solve: bool | None = None, n_jobs: int | None = 1,
                 tol: float = 1e-3, max_iter: int = 1000, cache_size: float = 512.0,
                 fit_intercept: bool = True, scale: bool = True, random_state=None,
                 epochs: int | None = None, step_size: float | None = None,
                 n_partitions: int | None = None, linear_solver: str = "dsvrg",
                 probability: bool = False,
                 max_support_vectors: int | None = None, class_weight=None) -> None:
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.lam = lam
        self.upsilon = upsilon
        self.theta = theta
        self.p = p
        self.levels = levels
        self.n_strata = n_strata
        self.landmark_candidates = landmark_candidates
        self.warm_start_scaling = warm_start_scaling
        self.final_global_solve = final_global_solve
        self.n_jobs = n_jobs
        self.tol = tol
        self.max_iter = max_iter
        self.cache_size = cache_size
        self.fit_intercept = fit_intercept
        self.scale = scale
        self.random_state = random_state
        self.probability = probability
        self.epochs = epochs
        self.step_size = step_size
        self.n_partitions = n_partitions
        self.max_support_vectors = max_support_vectors
        self.linear_solver = linear_solver
        self.class_weight = class_weight

    def _uses_dsvrg(self) -> bool:
        return self.kernel == "linear" and self.linear_solver == "dsvrg"

    def _algorithm_for_kernel(self) -> str:
        return "sodm-dsvrg" if self._uses_dsvrg() else "sodm-hierarchical"

    def merge_factor(self, n_rows: int, plateau_rows: int | None = None) -> int | None:
        """The ``p`` of a kernel fit on ``n_rows`` rows: ``p`` when set; else, after an
        "auto" search whose learning curve was flat from ``plateau_rows`` rows
        (``solver.auto.search.plateau_rows``) and with ``levels`` None, partitions of about
        that many rows (:func:`solver.sodm.hierarchy.plateau_p`); else None (the solver's
        default)."""
        if self.p is not None:
            return int(self.p)
        if plateau_rows is None or self.levels is not None or self._uses_dsvrg():
            return None
        from solver.sodm.hierarchy import plateau_p

        return plateau_p(n_rows, plateau_rows, float(self.cache_size))

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop, sample_weight=None):
        opt = {k: v for k, v in {"n_strata": self.n_strata,
                                 "landmark_candidates": self.landmark_candidates}.items()
               if v is not None}
        if self._uses_dsvrg():
            from solver.linear.dsvrg import sodm_linear

            for name in ("n_partitions", "epochs", "step_size"):
                if getattr(self, name) is not None:
                    opt[name] = getattr(self, name)
            res = sodm_linear(Z, y, params, tol=float(self.tol), random_state=seed,
                              X_val=Z_val, y_val=y_val, progress=progress,
                              should_stop=should_stop, sample_weight=sample_weight, **opt)
            return "w", np.asarray(res.w, dtype=np.float64).ravel(), list(res.history), \
                bool(res.stopped)
        from solver.sodm.hierarchy import sodm_kernel

        for name in ("levels", "final_global_solve"):
            if getattr(self, name) is not None:
                opt[name] = getattr(self, name)
        n_jobs = 1 if self.n_jobs is None else int(self.n_jobs)
        p = self.merge_factor(Z.shape[0], getattr(self, "_plateau_rows", None))
        # after an "auto" search, a structure left to the solver may stop adding partitions
        # (SearchSettings.partition_gain, in points)
        gain = getattr(self, "_partition_gain", None)
        if gain is not None and self.p is None and self.levels is None:
            opt["partition_gain"] = float(gain) / 100.0
        res = sodm_kernel(Z, y, kernel, params, p=p,
                          warm_start=self.warm_start_scaling, n_jobs=n_jobs,
                          tol=float(self.tol),
                          max_iter=int(self.max_iter), cache_size=float(self.cache_size),
                          random_state=seed, X_val=Z_val, y_val=y_val, progress=progress,
                          should_stop=should_stop, sample_weight=sample_weight, **opt)
        alpha = np.asarray(res.alpha, dtype=np.float64)
        history = list(res.history)
        if res.last_level > 0 and res.partitions is not None and history:
            from solver.sodm.partition import level_ids

            top = int(history[0]["level"])
            ids = level_ids(res.partitions, res.p, top, int(res.last_level))
            alpha = average_local_duals(alpha, ids, sample_weight, res.kept_partitions)
        return "alpha", alpha, history, bool(res.stopped)


def average_local_duals(alpha: np.ndarray, ids: np.ndarray,
                        sample_weight: np.ndarray | None = None,
                        kept: np.ndarray | None = None) -> np.ndarray:
    """Put SODM's output (local duals of the last solved level) on the global ODM scale.

    Without a final global solve SODM returns the concatenation of the local ODM solutions of
    the last solved level (partition id ``ids[i]`` per row). Each local model f_k already has
    margins around 1 on its own data, so the concatenation's decision sum_k f_k is about K
    times the ODM's. The estimator stores the size-weighted average sum_k (m_k / M) f_k
    instead, i.e. ``alpha_i * m_k / M``: the same predictions (a positive rescaling when the
    sizes are equal, which the balanced partitions make them up to one row) and decision values
    on the ODM margin scale, so margin statistics and the theta band mean what they say.
    With ``sample_weight`` a partition's size is its weights' sum. ``kept``: the partitions
    in the model when the held-out gain rule dropped the others (their duals are zero), whose
    sizes alone make up ``M``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    part_sizes = np.bincount(ids, weights=sample_weight).astype(np.float64)
    total = float(part_sizes.sum() if kept is None else part_sizes[kept].sum())
    return np.asarray(alpha, dtype=np.float64) * (part_sizes[ids] / total)[:, None]


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
    """Ca-ODM: Cascade SVM (Graf et al. 2004) for ODM over ``2**levels`` random partitions.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}, default="rbf"
        rbf ``exp(-gamma ||x - z||^2)``, poly ``(gamma x.z + coef0)^degree`` or linear
        ``x.z``.
    gamma : "scale", "auto" or float > 0, default="scale"
        Coefficient of the rbf and poly kernels. "scale": ``1 / (n_features *
        Var(X_scaled))`` on the scaled training features (1.0 when that variance is 0);
        "auto": chosen by ``fit`` (see ``lam``).
    degree : int >= 1, default=3
        Degree of the poly kernel.
    coef0 : float, default=1.0
        Constant term of the poly kernel.
    lam : float or "auto", default=1e4
        Weight of the mean squared deviation from the margin band (the paper's lambda; it
        plays the role of an SVM's ``C * M``). "auto" (also for ``gamma`` and ``theta``,
        each independently): chosen by k-fold CV with the exact solver on subsamples of the
        training rows before the final fit (``solver.auto.search``).
    upsilon : float, default=0.5
        Weight of the deviations above the band relative to those below (libodm's mu).
    theta : float or "auto", default=0.2
        Half-width of the margin band ``[1 - theta, 1 + theta]``: margins inside it cost
        nothing.
    levels : int >= 0 or None, default=3
        The data is cut into ``2**levels`` random balanced partitions; support vectors move
        up a binary tree, siblings merged and re-solved warm-started.
    warm_start_scaling : {"rescale", "literal"}, default="rescale"
        How a level's duals warm-start the next: rescaled by the ratio of the old to the new
        problem size, or as the paper states them (not scikit-learn's boolean
        ``warm_start``).
    n_jobs : int != 0 or None, default=1
        Processes that solve the partitions of a level; -1: all cores; None: 1.
    tol : float > 0, default=1e-3
        Stopping tolerance on the largest projected-gradient (KKT) violation.
    max_iter : int >= 1, default=1000
        Most epochs of one coordinate-descent solve.
    cache_size : float > 0, default=512.0
        Megabytes of kernel cache of a kernel solve.
    fit_intercept : bool, default=True
        Append a constant feature 1 (as the authors' code does); False gives exactly the
        paper's model, which has no bias.
    scale : bool, default=True
        Min-max scale every feature to [0, 1] on the training data, inside the model
        (constant features map to 0).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choices: a binary problem gets it unchanged, one-vs-rest problem
        k a seed derived from it and k; None draws a fresh seed.
    class_weight : dict, "balanced" or None, default=None
        Multiplies the loss of each class's rows: ``{label: weight}`` (other labels 1) or
        "balanced" (``n_samples / (n_classes * bincount(y))``); combined by product with
        ``fit``'s ``sample_weight``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; for two classes ``classes_[1]`` is the positive one (y = +1).
        ``n_problems`` below is 1 for two classes, else ``n_classes`` (one-vs-rest).
    n_features_in_ : int
        Number of features seen by ``fit``.
    gamma_ : float
        The kernel coefficient used ("scale" and "auto" resolved).
    lam_ : float
        The ``lam`` used ("auto" resolved).
    theta_ : float
        The ``theta`` used ("auto" resolved).
    w_ : ndarray of shape (n_problems, n_features [+ 1]) or None
        Linear models: one weight row per problem, the intercept weight last when
        ``fit_intercept``; None for kernel models.
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features) or None
        Kernel models: the support vectors in the scaled feature space; None for linear
        models.
    dual_coef_ : ndarray of shape (n_problems, n_SV) or None
        Kernel models: ``y_j (zeta_j - beta_j)`` of each support vector per problem.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (linear models: of the rows outside some problem's
        band) in the rows given to ``fit``.
    n_support_ : ndarray of shape (n_problems,)
        Rows outside the band ``[1 - theta, 1 + theta]`` of each problem.
    n_iter_ : ndarray of shape (n_problems,)
        Levels solved of each problem.
    history_ : list of dict
        The solver's records (per level, epoch or problem).
    fit_info_ : dict
        What the fit did: algorithm, rows, seconds, seed, the parameters used, and the
        "auto" search (``fit_info_["auto"]``) and calibration records when there were any.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from solver.estimators import CascadeODMClassifier
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = CascadeODMClassifier(levels=2, random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

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
    """DiP-ODM: DiP-SVM (Singh et al. 2017) partitions that preserve k-means clusters.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}, default="rbf"
        rbf ``exp(-gamma ||x - z||^2)``, poly ``(gamma x.z + coef0)^degree`` or linear
        ``x.z``.
    gamma : "scale", "auto" or float > 0, default="scale"
        Coefficient of the rbf and poly kernels. "scale": ``1 / (n_features *
        Var(X_scaled))`` on the scaled training features (1.0 when that variance is 0);
        "auto": chosen by ``fit`` (see ``lam``).
    degree : int >= 1, default=3
        Degree of the poly kernel.
    coef0 : float, default=1.0
        Constant term of the poly kernel.
    lam : float or "auto", default=1e4
        Weight of the mean squared deviation from the margin band (the paper's lambda; it
        plays the role of an SVM's ``C * M``). "auto" (also for ``gamma`` and ``theta``,
        each independently): chosen by k-fold CV with the exact solver on subsamples of the
        training rows before the final fit (``solver.auto.search``).
    upsilon : float, default=0.5
        Weight of the deviations above the band relative to those below (libodm's mu).
    theta : float or "auto", default=0.2
        Half-width of the margin band ``[1 - theta, 1 + theta]``: margins inside it cost
        nothing.
    levels : int >= 0 or None, default=3
        ``2**levels`` partitions, each k-means cluster dealt evenly over them, then combined
        as Ca-ODM does.
    n_clusters : int >= 1, default=20
        k-means clusters in the input space.
    warm_start_scaling : {"rescale", "literal"}, default="rescale"
        How a level's duals warm-start the next: rescaled by the ratio of the old to the new
        problem size, or as the paper states them (not scikit-learn's boolean
        ``warm_start``).
    n_jobs : int != 0 or None, default=1
        Processes that solve the partitions of a level; -1: all cores; None: 1.
    tol : float > 0, default=1e-3
        Stopping tolerance on the largest projected-gradient (KKT) violation.
    max_iter : int >= 1, default=1000
        Most epochs of one coordinate-descent solve.
    cache_size : float > 0, default=512.0
        Megabytes of kernel cache of a kernel solve.
    fit_intercept : bool, default=True
        Append a constant feature 1 (as the authors' code does); False gives exactly the
        paper's model, which has no bias.
    scale : bool, default=True
        Min-max scale every feature to [0, 1] on the training data, inside the model
        (constant features map to 0).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choices: a binary problem gets it unchanged, one-vs-rest problem
        k a seed derived from it and k; None draws a fresh seed.
    class_weight : dict, "balanced" or None, default=None
        Multiplies the loss of each class's rows: ``{label: weight}`` (other labels 1) or
        "balanced" (``n_samples / (n_classes * bincount(y))``); combined by product with
        ``fit``'s ``sample_weight``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; for two classes ``classes_[1]`` is the positive one (y = +1).
        ``n_problems`` below is 1 for two classes, else ``n_classes`` (one-vs-rest).
    n_features_in_ : int
        Number of features seen by ``fit``.
    gamma_ : float
        The kernel coefficient used ("scale" and "auto" resolved).
    lam_ : float
        The ``lam`` used ("auto" resolved).
    theta_ : float
        The ``theta`` used ("auto" resolved).
    w_ : ndarray of shape (n_problems, n_features [+ 1]) or None
        Linear models: one weight row per problem, the intercept weight last when
        ``fit_intercept``; None for kernel models.
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features) or None
        Kernel models: the support vectors in the scaled feature space; None for linear
        models.
    dual_coef_ : ndarray of shape (n_problems, n_SV) or None
        Kernel models: ``y_j (zeta_j - beta_j)`` of each support vector per problem.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (linear models: of the rows outside some problem's
        band) in the rows given to ``fit``.
    n_support_ : ndarray of shape (n_problems,)
        Rows outside the band ``[1 - theta, 1 + theta]`` of each problem.
    n_iter_ : ndarray of shape (n_problems,)
        Levels solved of each problem.
    history_ : list of dict
        The solver's records (per level, epoch or problem).
    fit_info_ : dict
        What the fit did: algorithm, rows, seconds, seed, the parameters used, and the
        "auto" search (``fit_info_["auto"]``) and calibration records when there were any.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from solver.estimators import DiPODMClassifier
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = DiPODMClassifier(levels=1, n_clusters=4, random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

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
    """DC-ODM: DC-SVM (Hsieh et al. 2014) kernel k-means partitions, then a global solve.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}, default="rbf"
        rbf ``exp(-gamma ||x - z||^2)``, poly ``(gamma x.z + coef0)^degree`` or linear
        ``x.z``.
    gamma : "scale", "auto" or float > 0, default="scale"
        Coefficient of the rbf and poly kernels. "scale": ``1 / (n_features *
        Var(X_scaled))`` on the scaled training features (1.0 when that variance is 0);
        "auto": chosen by ``fit`` (see ``lam``).
    degree : int >= 1, default=3
        Degree of the poly kernel.
    coef0 : float, default=1.0
        Constant term of the poly kernel.
    lam : float or "auto", default=1e4
        Weight of the mean squared deviation from the margin band (the paper's lambda; it
        plays the role of an SVM's ``C * M``). "auto" (also for ``gamma`` and ``theta``,
        each independently): chosen by k-fold CV with the exact solver on subsamples of the
        training rows before the final fit (``solver.auto.search``).
    upsilon : float, default=0.5
        Weight of the deviations above the band relative to those below (libodm's mu).
    theta : float or "auto", default=0.2
        Half-width of the margin band ``[1 - theta, 1 + theta]``: margins inside it cost
        nothing.
    levels : int >= 0 or None, default=2
        Level ``l = levels .. 1`` solves ``fanout**l`` kernel k-means clusters, each warm-
        started from the level before; a global solve ends the fit.
    fanout : int >= 2, default=4
        Clusters per level: ``fanout**l`` at level ``l``.
    sample_size : int >= 1, default=2000
        Rows of the sample the kernel k-means runs on (every row then joins its nearest
        cluster mean).
    warm_start_scaling : {"rescale", "literal"}, default="rescale"
        How a level's duals warm-start the next: rescaled by the ratio of the old to the new
        problem size, or as the paper states them (not scikit-learn's boolean
        ``warm_start``).
    n_jobs : int != 0 or None, default=1
        Processes that solve the partitions of a level; -1: all cores; None: 1.
    tol : float > 0, default=1e-3
        Stopping tolerance on the largest projected-gradient (KKT) violation.
    max_iter : int >= 1, default=1000
        Most epochs of one coordinate-descent solve.
    cache_size : float > 0, default=512.0
        Megabytes of kernel cache of a kernel solve.
    fit_intercept : bool, default=True
        Append a constant feature 1 (as the authors' code does); False gives exactly the
        paper's model, which has no bias.
    scale : bool, default=True
        Min-max scale every feature to [0, 1] on the training data, inside the model
        (constant features map to 0).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choices: a binary problem gets it unchanged, one-vs-rest problem
        k a seed derived from it and k; None draws a fresh seed.
    class_weight : dict, "balanced" or None, default=None
        Multiplies the loss of each class's rows: ``{label: weight}`` (other labels 1) or
        "balanced" (``n_samples / (n_classes * bincount(y))``); combined by product with
        ``fit``'s ``sample_weight``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; for two classes ``classes_[1]`` is the positive one (y = +1).
        ``n_problems`` below is 1 for two classes, else ``n_classes`` (one-vs-rest).
    n_features_in_ : int
        Number of features seen by ``fit``.
    gamma_ : float
        The kernel coefficient used ("scale" and "auto" resolved).
    lam_ : float
        The ``lam`` used ("auto" resolved).
    theta_ : float
        The ``theta`` used ("auto" resolved).
    w_ : ndarray of shape (n_problems, n_features [+ 1]) or None
        Linear models: one weight row per problem, the intercept weight last when
        ``fit_intercept``; None for kernel models.
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features) or None
        Kernel models: the support vectors in the scaled feature space; None for linear
        models.
    dual_coef_ : ndarray of shape (n_problems, n_SV) or None
        Kernel models: ``y_j (zeta_j - beta_j)`` of each support vector per problem.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (linear models: of the rows outside some problem's
        band) in the rows given to ``fit``.
    n_support_ : ndarray of shape (n_problems,)
        Rows outside the band ``[1 - theta, 1 + theta]`` of each problem.
    n_iter_ : ndarray of shape (n_problems,)
        Levels solved of each problem.
    history_ : list of dict
        The solver's records (per level, epoch or problem).
    fit_info_ : dict
        What the fit did: algorithm, rows, seconds, seed, the parameters used, and the
        "auto" search (``fit_info_["auto"]``) and calibration records when there were any.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from solver.estimators import DCODMClassifier
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = DCODMClassifier(levels=1, fanout=2, sample_size=100, random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
    """

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

    Parameters
    ----------
    kernel : {"linear"}, default="linear"
        The only kernel (ODM-SVRG is a linear solver).
    lam : float or "auto", default=1e4
        Weight of the mean squared deviation from the margin band (the paper's lambda; it
        plays the role of an SVM's ``C * M``). "auto" (also for ``gamma`` and ``theta``,
        each independently): chosen by k-fold CV with the exact solver on subsamples of the
        training rows before the final fit (``solver.auto.search``).
    upsilon : float, default=0.5
        Weight of the deviations above the band relative to those below (libodm's mu).
    theta : float or "auto", default=0.2
        Half-width of the margin band ``[1 - theta, 1 + theta]``: margins inside it cost
        nothing.
    epochs : int >= 1 or None, default=None
        SVRG epochs. None: 20.
    step_size : float in (0, 1) or None, default=None
        Step size. None: derived from the smoothness constant, as DSVRG.
    inner_steps : int >= 1 or None, default=None
        Steps per epoch on rows drawn with replacement. None: ``2 M``.
    tol : float > 0, default=1e-6
        Stop when the gradient norm falls to ``tol`` times its value at 0.
    fit_intercept : bool, default=True
        Append a constant feature 1 (as the authors' code does); False gives exactly the
        paper's model, which has no bias.
    scale : bool, default=True
        Min-max scale every feature to [0, 1] on the training data, inside the model
        (constant features map to 0).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choices: a binary problem gets it unchanged, one-vs-rest problem
        k a seed derived from it and k; None draws a fresh seed.
    class_weight : dict, "balanced" or None, default=None
        Multiplies the loss of each class's rows: ``{label: weight}`` (other labels 1) or
        "balanced" (``n_samples / (n_classes * bincount(y))``); combined by product with
        ``fit``'s ``sample_weight``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; for two classes ``classes_[1]`` is the positive one (y = +1).
        ``n_problems`` below is 1 for two classes, else ``n_classes`` (one-vs-rest).
    n_features_in_ : int
        Number of features seen by ``fit``.
    gamma_ : float
        The kernel coefficient used ("scale" and "auto" resolved).
    lam_ : float
        The ``lam`` used ("auto" resolved).
    theta_ : float
        The ``theta`` used ("auto" resolved).
    w_ : ndarray of shape (n_problems, n_features [+ 1]) or None
        Linear models: one weight row per problem, the intercept weight last when
        ``fit_intercept``; None for kernel models.
    support_vectors_ : ndarray or CSR matrix of shape (n_SV, n_features) or None
        Kernel models: the support vectors in the scaled feature space; None for linear
        models.
    dual_coef_ : ndarray of shape (n_problems, n_SV) or None
        Kernel models: ``y_j (zeta_j - beta_j)`` of each support vector per problem.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (linear models: of the rows outside some problem's
        band) in the rows given to ``fit``.
    n_support_ : ndarray of shape (n_problems,)
        Rows outside the band ``[1 - theta, 1 + theta]`` of each problem.
    n_iter_ : ndarray of shape (n_problems,)
        SVRG epochs run of each problem.
    history_ : list of dict
        The solver's records (per level, epoch or problem).
    fit_info_ : dict
        What the fit did: algorithm, rows, seconds, seed, the parameters used, and the
        "auto" search (``fit_info_["auto"]``) and calibration records when there were any.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> from solver.estimators import SVRGODMClassifier
    >>> X, y = make_classification(n_samples=200, random_state=0)
    >>> clf = SVRGODMClassifier(kernel="linear", random_state=0).fit(X, y)
    >>> clf.predict(X[:3]).shape
    (3,)
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


BASELINE_ESTIMATORS: dict[str, type[ODMBase]] = {
    "cascade": CascadeODMClassifier,
    "dip": DiPODMClassifier,
    "dc": DCODMClassifier,
    "svrg": SVRGODMClassifier,
}
