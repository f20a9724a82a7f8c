"""The shared fit / predict machinery of the ODM estimators: :class:`ODMBase`.

``ODMBase`` does what every estimator of ``solver.estimators`` does the same way: parameter
checks, labels and one-vs-rest, scaling, row and class weights, the "auto" search, the fitted
state, Platt calibration and prediction. A subclass (``_classes.py``) declares its parameters
and solves one binary problem (``_solve_problem``); :func:`build_fitted` installs a solution
computed elsewhere (Spark, model files). The conventions are in the package docstring
(``solver/estimators/__init__.py``).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from solver.auto.search import with_final_fit
from solver.core.cputime import CpuClock
from solver.core.preprocessing import MinMaxScaler, append_constant
from solver.core.row_blocks import LazyRows
from solver.core.training import (
    fit_info,
    iterations,
    jsonable,
    overall_variance,
    plain,
    problem_progress,
    problem_seed,
    resolve_gamma,
    seed_for,
    weighted_variance,
)
from solver.exceptions import FitCancelled, InvalidParameterError

__all__ = ["ODMBase", "build_fitted", "class_weights", "class_weight_table", "row_weights",
           "KERNELS", "check_kernel_range", "is_int", "is_real", "require"]

KERNELS = ("linear", "rbf", "poly")
ProgressFn = Callable[[float, str, dict], None]
StopFn = Callable[[], bool]

# Parameters an "auto" search's cross-validation fits (ODMClassifier) share with the model.
_CV_PARAMS = ("degree", "coef0", "upsilon", "tol", "max_iter", "cache_size", "fit_intercept")


def is_int(v: Any) -> bool:
    """An integer, not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real(v: Any) -> bool:
    """A finite real number, not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def require(cond: bool, name: str, value: Any, what: str) -> None:
    """Raise the ``ValueError`` naming parameter ``name`` unless ``cond``."""
    if not cond:
        raise InvalidParameterError(name, f"invalid parameter {name}={value!r}: {what}")


def check_kernel_range(kernel: Any, max_sq_norm: float) -> None:
    """Refuse a polynomial kernel whose values can pass ``MAX_KERNEL_VALUE`` on rows with
    ``|x|^2 <= max_sq_norm`` (the rows the solver sees: scaled, with the constant column):
    ``InvalidParameterError`` naming ``coef0`` or ``gamma``, whichever term of
    ``gamma x.z + coef0`` is the larger. The service asks it before a job is queued."""
    from solver.core.kernels import MAX_KERNEL_VALUE

    bound = kernel.value_bound(max_sq_norm)
    if kernel.name != "poly" or bound <= MAX_KERNEL_VALUE:
        return
    name = "coef0" if abs(kernel.coef0) >= kernel.gamma * max_sq_norm else "gamma"
    raise InvalidParameterError(
        name, f"the polynomial kernel (gamma x.z + coef0)^degree reaches {bound:.3g} "
        f"(gamma={kernel.gamma:.6g}, coef0={kernel.coef0:.6g}, degree={kernel.degree}, rows "
        f"with |x|^2 up to {max_sq_norm:.6g}); at most {MAX_KERNEL_VALUE:.0e}: a smaller "
        f"|{name}| or degree keeps it finite")


def _opt(pred: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or pred(v)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool | np.bool_)


def _pos_int(minimum: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and v >= minimum


def _class_weight_ok(v: Any) -> bool:
    return v is None or (isinstance(v, str) and v == "balanced") or (
        isinstance(v, dict) and all(is_real(w) and float(w) > 0 for w in v.values()))


# Parameter name -> (valid?, what a valid value is); shared by every estimator class.
_PARAM_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "kernel": (lambda v: v in KERNELS, f"one of {KERNELS}"),
    "gamma": (lambda v: v in ("scale", "auto") or (is_real(v) and float(v) > 0),
              "'scale', 'auto' or a positive finite number"),
    "degree": (_pos_int(1), "int >= 1"),
    "coef0": (is_real, "a finite number"),
    "lam": (lambda v: v == "auto" or is_real(v), "a finite number or 'auto'"),
    "upsilon": (is_real, "a finite number"),
    "theta": (lambda v: v == "auto" or is_real(v), "a finite number or 'auto'"),
    "tol": (lambda v: is_real(v) and v > 0, "a positive number"),
    "max_iter": (_pos_int(1), "int >= 1"),
    "max_support_vectors": (_opt(_pos_int(1)), "None or int >= 1"),
    "cache_size": (lambda v: is_real(v) and v > 0, "a positive number of megabytes"),
    "shrinking": (_is_bool, "a bool"),
    "fit_intercept": (_is_bool, "a bool"),
    "scale": (_is_bool, "a bool"),
    "random_state": (lambda v: v is None or is_int(v)
                     or isinstance(v, np.random.RandomState | np.random.Generator),
                     "int, None or RandomState"),
    "p": (_opt(_pos_int(2)), "None or int >= 2"),
    "levels": (_opt(_pos_int(0)), "None or int >= 0"),
    "n_strata": (_opt(_pos_int(1)), "None or int >= 1"),
    "landmark_candidates": (_opt(_pos_int(1)), "None or int >= 1"),
    "warm_start_scaling": (lambda v: v in ("rescale", "literal"), "'rescale' or 'literal'"),
    "final_global_solve": (_opt(_is_bool), "None or a bool"),
    "n_jobs": (_opt(lambda v: is_int(v) and v != 0), "None or a non-zero int (-1: all cores)"),
    "epochs": (_opt(_pos_int(1)), "None or int >= 1"),
    "step_size": (_opt(lambda v: is_real(v) and 0 < v < 1), "None or a number in (0, 1)"),
    "n_partitions": (_opt(_pos_int(1)), "None or int >= 1"),
    "linear_solver": (lambda v: v in ("dsvrg", "hierarchical"), "'dsvrg' or 'hierarchical'"),
    "n_clusters": (_pos_int(1), "int >= 1"),
    "fanout": (_pos_int(2), "int >= 2"),
    "sample_size": (_pos_int(1), "int >= 1"),
    "inner_steps": (_opt(_pos_int(1)), "None or int >= 1"),
    "probability": (_is_bool, "a bool"),
    "class_weight": (_class_weight_ok,
                     "None, 'balanced' or a dict {label: positive finite weight}"),
}


def class_weights(class_weight: Any, y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """Per-class weight in ``classes`` order: ones for None, ``n / (n_classes * count)`` for
    ``"balanced"``, the dict's values (1 for labels it does not name); a dict key that is
    not a class of ``y`` is a ``ValueError`` naming it. A key may also be the label's text
    (``"1"`` for the label 1 or 1.0): JSON objects, the service's requests and model files
    have text keys."""
    counts = np.array([np.count_nonzero(y == c) for c in classes], dtype=np.float64)
    return class_weight_table(class_weight, classes, counts)


def class_weight_table(class_weight: Any, classes: np.ndarray, counts: np.ndarray
                       ) -> np.ndarray:
    """:func:`class_weights` from the classes' row counts (what a backend that never holds
    ``y`` knows, e.g. Spark)."""
    if class_weight is None:
        return np.ones(len(classes))
    if isinstance(class_weight, str):
        counts = np.asarray(counts, dtype=np.float64)
        return float(counts.sum()) / (len(classes) * counts)
    out = np.ones(len(classes))
    known: dict[Any, int] = {}
    for k, c in enumerate(classes):
        c = plain(c)
        for text in ([str(int(c))] if isinstance(c, float) and c.is_integer() else []) + \
                [str(c)]:
            known.setdefault(text, k)
    for k, c in enumerate(classes):
        known[plain(c)] = k
    for label, w in class_weight.items():
        k = known.get(plain(label))
        if k is None:
            raise InvalidParameterError(
                "class_weight", f"invalid parameter class_weight: label {label!r} is not a "
                f"class of y (classes: {[plain(c) for c in classes]})")
        out[k] = float(w)
    return out


def row_weights(est: Any, y: np.ndarray, sample_weight: Any) -> np.ndarray | None:
    """Each row's weight, ``sample_weight`` times its class's ``class_weight`` (None when
    both are absent); ``ValueError`` for a wrong shape, a negative or non-finite weight, or
    weights that are all zero."""
    from solver.core.formulation import check_weights

    cw = getattr(est, "class_weight", None)
    sw = check_weights(sample_weight, len(y), allow_zero=True)
    if cw is None:
        if sw is not None and len(sw) and not np.any(sw > 0):
            raise ValueError("sample_weight: every weight is zero; at least one row needs a "
                             "positive weight")
        return sw
    classes, idx = np.unique(y, return_inverse=True)
    # "balanced" counts the rows that are fitted: a row of weight 0 is a row left out
    live = np.ones(len(y), dtype=bool) if sw is None else sw > 0
    counts = np.bincount(idx[live], minlength=len(classes)).astype(np.float64)
    table = np.zeros(len(classes))
    present = counts > 0 if isinstance(cw, str) else np.ones(len(classes), dtype=bool)
    table[present] = class_weight_table(cw, classes[present], counts[present])
    per_class = table[idx]
    out = per_class if sw is None else sw * per_class
    if len(out) and not np.any(out > 0):
        raise ValueError("sample_weight: every weight is zero; at least one row needs a "
                         "positive weight")
    return out


class ODMBase(ClassifierMixin, BaseEstimator):
    """Shared fit / predict logic; subclasses define parameters and ``_solve_problem``."""

    _algorithm_name = "odm"
    # The estimator the "auto" search cross-validates with: the exact solver whatever the
    # subclass (ODMClassifier, set where it is defined: solver/estimators/_classes.py).
    _cv_estimator: ClassVar[type[ODMBase]]

    # ----------------------------------------------------------------------------- params
    def validate_params(self) -> None:
        """Check every hyperparameter; raises ``ValueError`` naming the bad parameter.

        Called by ``fit``; the service also calls it to reject bad requests early.
        """
        from solver.core.formulation import ODMParams

        for name, value in self.get_params(deep=False).items():
            rule = _PARAM_RULES.get(name)
            if rule is not None:
                require(rule[0](value), name, value, rule[1])
        # "auto" values are checked with a valid stand-in (the search only proposes valid ones)
        ODMParams(lam=1.0 if self.lam == "auto" else float(self.lam),
                  upsilon=float(self.upsilon),
                  theta=0.5 if self.theta == "auto" else float(self.theta)).validate()
        self._validate_extra_params()

    def _validate_extra_params(self) -> None:
        """Class-specific constraints beyond the per-parameter rules."""

    def _params(self):
        """The ODM parameters of the fitted model ("auto" resolved by ``fit``)."""
        from solver.core.formulation import ODMParams

        lam = getattr(self, "lam_", None) if self.lam == "auto" else self.lam
        theta = getattr(self, "theta_", None) if self.theta == "auto" else self.theta
        if lam is None or theta is None:
            raise ValueError("lam / theta are 'auto': they are chosen by fit")
        return ODMParams(lam=float(lam), upsilon=float(self.upsilon), theta=float(theta))

    def _auto_params(self) -> tuple[str, ...]:
        """The parameters set to "auto" (gamma only counts for the RBF / poly kernels)."""
        return tuple(name for name in ("lam", "gamma", "theta")
                     if getattr(self, name) == "auto"
                     and not (name == "gamma" and self.kernel == "linear"))

    def _make_kernel(self, gamma: float):
        from solver.core.kernels import Kernel

        return Kernel(self.kernel, gamma=float(gamma), degree=int(self.degree),
                      coef0=float(self.coef0))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    # ------------------------------------------------------------------------- features
    def _model_space(self, X):
        """Scaled features plus the constant column: what the solver and kernels see."""
        Xs = self._scaler.transform(X) if self._scaler is not None else X
        return append_constant(Xs) if self.fit_intercept else Xs

    def _check_X(self, X, *, reset: bool):
        return validate_data(self, X, reset=reset, accept_sparse="csr", dtype=np.float64,
                             ensure_all_finite=True)

    # ------------------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None, *, X_val=None, y_val=None,
            progress: ProgressFn | None = None, should_stop: StopFn | None = None):
        """Train on X (n, d) dense or CSR and labels y; returns self.

        ``sample_weight`` (n,) non-negative weights of the rows' losses, combined with
        ``class_weight`` (the docstring of ``solver.estimators``); ``X_val, y_val``
        (optional) are passed to SODM for per-level validation accuracy;
        ``progress(fraction, message, record)`` is called after each level / epoch / problem;
        ``should_stop()`` is polled by the solvers and a stop raises ``FitCancelled``.
        """
        t0 = time.perf_counter()
        self.validate_params()
        X, y, classes, y_idx = self._fit_inputs(X, y)
        n_given = X.shape[0]
        X, y, classes, y_idx, sw, rows, raw_sw = self._weighted_rows(X, y, sample_weight)
        scaler, Xs, gamma, seed = self._scaled(X, sw)
        lam, theta = self.lam, self.theta
        auto = self._auto_params()
        search_info = None
        # the rows from which the search's learning curve is flat (SODM's partitions)
        self._plateau_rows = None
        self._partition_gain = None  # the search's partition_gain (SODM's final fit)
        if auto:
            res = self._auto_search(Xs, y, auto, gamma, seed,
                                    _shifted_progress(progress, 0.0, 0.5, ""), should_stop,
                                    self._cv_weights(sw, raw_sw))
            lam, gamma, theta = res.lam, res.gamma if "gamma" in auto else gamma, res.theta
            self._plateau_rows = res.plateau_rows
            self._partition_gain = res.settings.partition_gain
            search_info = self._with_cv_score(res.info(), sample_weight)
            progress = _shifted_progress(progress, 0.5, 1.0, "final fit: ")
            final_clock = CpuClock().__enter__()
        self.lam_, self.theta_ = float(lam), float(theta)
        Z = append_constant(Xs) if self.fit_intercept else Xs
        self._scaler = scaler
        Z_val, yv_idx = self._validation_rows(X_val, y_val, classes)
        kernel = self._make_kernel(gamma)
        if Z.shape[0]:
            from solver.core.kernels import row_sq_norms

            check_kernel_range(kernel, float(row_sq_norms(Z).max()))
        history, n_iter, solutions = self._solve_problems(
            Z, y_idx, classes, kernel, seed, Z_val, yv_idx, progress, should_stop, sw)
        state = self._fitted_state(solutions, Z, Xs, y_idx, float(theta), kernel, seed)
        if rows is not None:
            state["support"] = rows[state["support"]]  # indices into the rows given
        info = fit_info(algorithm=self._algorithm_for_kernel(), n_train=X.shape[0],
                        n_features=X.shape[1], sparse_input=sp.issparse(X),
                        n_problems=len(solutions), seed=seed, n_iter=n_iter,
                        seconds=time.perf_counter() - t0,
                        params={"lam": float(lam), "gamma": float(gamma),
                                "theta": float(theta)})
        if sample_weight is not None or getattr(self, "class_weight", None) is not None:
            info["weights"] = {"class_weight": jsonable(getattr(self, "class_weight", None)),
                               **({"sum": float(X.shape[0]), "min": 1.0, "max": 1.0}
                                  if sw is None else {"sum": float(sw.sum()),
                                                      "min": float(sw.min()),
                                                      "max": float(sw.max())}),
                               "rows_dropped": int(n_given - X.shape[0])}
        if search_info is not None:
            info["auto"] = with_final_fit(search_info, final_clock.elapsed())
        _set_state(self, classes=classes, n_features_in=X.shape[1], scaler=scaler,
                   gamma=gamma, history=history, fit_info=info, **state)
        if getattr(self, "probability", False):
            self._calibrate(X, y, seed, should_stop, raw_sw)
        return self

    def _weighted_rows(self, X, y, sample_weight):
        """The rows to fit and their weights: rows of weight 0 dropped (classes recounted),
        ``(X, y, classes, y_idx, weights or None, kept row indices or None, the kept rows'
        sample_weight or None)``; weights all equal are ``None`` (the same model)."""
        w = row_weights(self, y, sample_weight)
        if w is None:
            return X, y, *self._classes(y), None, None, None
        raw = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        rows = None
        if np.any(w == 0):
            rows = np.flatnonzero(w > 0)
            X, y, w = X[rows], y[rows], w[rows]
            raw = None if raw is None else raw[rows]
        classes, y_idx = self._classes(y)
        if np.all(w == w[0]):
            w = None
        return X, y, classes, y_idx, w, rows, raw

    def choose_auto(self, X, y, sample_weight=None, *, progress: ProgressFn | None = None,
                    should_stop: StopFn | None = None) -> dict[str, Any] | None:
        """The "auto" search of :meth:`fit` alone, without the final fit: its record
        (``info["chosen"]`` holds lam, gamma and theta), or None when nothing is "auto".
        For a backend that fits elsewhere (Spark) with the chosen values, which then gives
        the model ``fit`` would; ``with_final_fit`` adds the final fit's CPU seconds.
        ``X`` may be :class:`~solver.core.row_blocks.LazyRows` (statistics of all rows, scanned
        with this estimator's ``scale``, its variance weighted by the rows' weights as
        ``fit`` weights them; the rows the search uses read on demand): the same record as
        the matrix gives. Weights (``sample_weight``, ``class_weight``) are used as ``fit``
        uses them."""
        self.validate_params()
        auto = self._auto_params()
        if not auto:
            return None
        if isinstance(X, LazyRows):
            y = np.asarray(y)
            if len(y) != X.shape[0]:
                raise ValueError(f"{X.shape[0]} rows but {len(y)} labels")
            if len(y) and (X.stats.scaler is not None) != bool(self.scale):
                raise ValueError(f"the rows were scanned with scale="
                                 f"{X.stats.scaler is not None}, the estimator has "
                                 f"scale={self.scale}")
            self._classes(y)
            w = row_weights(self, y, sample_weight)
            if w is not None and np.any(w == 0):
                raise ValueError("sample_weight: rows of weight 0 must be left out of the rows "
                                 "given as LazyRows")
            sw = None if w is None or np.all(w == w[0]) else w
            raw = None if sample_weight is None else np.asarray(sample_weight, np.float64)
            Xs, seed = X, seed_for(self.random_state)
            gamma = self._numeric_gamma(X.shape[1], lambda: X.stats.variance)
        else:
            X, y, _, _ = self._fit_inputs(X, y)
            X, y, _, _, sw, _, raw = self._weighted_rows(X, y, sample_weight)
            _, Xs, gamma, seed = self._scaled(X, sw)
        return self._with_cv_score(self._auto_search(Xs, y, auto, gamma, seed, progress,
                                                     should_stop, self._cv_weights(sw, raw))
                                   .info(), sample_weight)

    def _with_cv_score(self, info: dict[str, Any], sample_weight: Any) -> dict[str, Any]:
        """The search record, with ``cv_score`` naming the folds' score when weights were
        given (``solver.auto.search.CVWeights``)."""
        if getattr(self, "class_weight", None) is not None:
            info["cv_score"] = "balanced_accuracy"
        elif sample_weight is not None:
            info["cv_score"] = "weighted_accuracy"
        return info

    def _scaled(self, X, sample_weight: np.ndarray | None = None
                ) -> tuple[MinMaxScaler | None, Any, float, int]:
        """The model's scaler, the scaled rows, the numeric gamma ("auto": the "scale"
        value the search starts from; its variance weighted by ``sample_weight``) and the
        seed."""
        scaler = MinMaxScaler.fit(X) if self.scale else None
        Xs = scaler.transform(X) if scaler is not None else X
        gamma = self._numeric_gamma(
            Xs.shape[1], lambda: overall_variance(Xs) if sample_weight is None
            else weighted_variance(Xs, sample_weight))
        return scaler, Xs, gamma, seed_for(self.random_state)

    def _numeric_gamma(self, n_features: int, variance: Callable[[], float]) -> float:
        """The kernel's gamma ("auto": the "scale" value the search starts from), given the
        variance of all scaled training entries (asked for only when needed)."""
        return resolve_gamma(self.kernel, "scale" if self.gamma == "auto" else self.gamma,
                             n_features, variance)

    def _fit_inputs(self, X, y) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """Validated ``X`` (dense, or CSR with sorted indices) and ``y``, the sorted classes
        and each row's class index; fewer than two classes is a ``ValueError``."""
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                             ensure_all_finite=True, y_numeric=False)
        if sp.issparse(X):
            X = sp.csr_matrix(X)
            X.sort_indices()
        classes, y_idx = self._classes(y)
        return X, y, classes, y_idx

    def _classes(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The sorted classes of ``y`` and each row's class index; fewer than two classes
        is a ``ValueError``."""
        classes, y_idx = np.unique(y, return_inverse=True)
        if len(classes) != 2:
            # Two distinct labels are always a binary problem (even non-integer floats such
            # as -1.5 / 2.5); more non-integer values look like a regression target.
            check_classification_targets(y)
        if len(classes) < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least two classes in y; only one class "
                f"({classes[0]!r}) is present"
            )
        return classes, y_idx

    def _validation_rows(self, X_val, y_val, classes: np.ndarray
                         ) -> tuple[Any, np.ndarray | None]:
        """The validation rows in model space whose label is a training class, and their
        class indices; ``(None, None)`` without validation data."""
        if X_val is None or y_val is None:
            return None, None
        Xv = self._check_X(X_val, reset=False)
        Z_val = self._model_space(Xv)
        y_val = np.asarray(y_val)
        yv_idx = np.searchsorted(classes, y_val)
        yv_idx = np.where(yv_idx < len(classes), yv_idx, 0)
        known = classes[yv_idx] == y_val
        Z_val = Z_val[known] if known.any() else None
        return Z_val, yv_idx[known]

    def _solve_problems(self, Z, y_idx: np.ndarray, classes: np.ndarray, kernel, seed: int,
                        Z_val, yv_idx: np.ndarray | None, progress: ProgressFn | None,
                        should_stop: StopFn | None, sample_weight: np.ndarray | None = None
                        ) -> tuple[list[dict], list[int], list[tuple[str, np.ndarray]]]:
        """The binary problem, or one one-vs-rest problem per class in turn: the history
        (records tagged with the problem when several), iterations and solutions; a stop
        raises ``FitCancelled`` with the history so far."""
        n_problems = 1 if len(classes) == 2 else len(classes)
        params = self._params()
        history: list[dict] = []
        n_iter: list[int] = []
        solutions: list[tuple[str, np.ndarray]] = []
        for k in range(n_problems):
            pos = 1 if n_problems == 1 else k
            y_pm = np.where(y_idx == pos, 1.0, -1.0)
            yv_pm = None if Z_val is None else np.where(yv_idx == pos, 1.0, -1.0)
            label = None if n_problems == 1 else classes[k]
            sub_progress = problem_progress(progress, k, n_problems, label)
            t_k = time.perf_counter()
            kind, sol, hist, stopped = self._solve_problem(
                Z, y_pm, kernel, params, seed=problem_seed(seed, k, n_problems),
                Z_val=Z_val, y_val=yv_pm, progress=sub_progress, should_stop=should_stop,
                sample_weight=sample_weight,
            )
            for rec in hist:
                rec = jsonable(rec)
                if n_problems > 1:
                    rec = {"problem": k, "class": plain(label), **rec}
                history.append(rec)
            if stopped:
                raise FitCancelled(history=history)
            solutions.append((kind, sol))
            n_iter.append(iterations(hist))
            if sub_progress is not None and not hist:
                sub_progress(1.0, "solved", {"seconds": time.perf_counter() - t_k})
        return history, n_iter, solutions

    def _fitted_state(self, solutions: list[tuple[str, np.ndarray]], Z, Xs,
                      y_idx: np.ndarray, theta: float, kernel, seed: int) -> dict[str, Any]:
        """The compact fitted state: ``w`` and the rows outside some band (linear), or the
        support vectors (within ``max_support_vectors``) and their dual coefficients."""
        n_problems = len(solutions)
        y_mat = _y_matrix(y_idx, n_problems)
        if solutions[0][0] == "w":
            W = np.vstack([s for _, s in solutions])
            ym = y_mat * np.asarray(Z @ W.T)
            outside = (ym < 1 - theta) | (ym > 1 + theta)
            return dict(w=W, n_support=outside.sum(axis=0).astype(np.int64),
                        support=np.flatnonzero(outside.any(axis=1)).astype(np.int64))
        A = [s for _, s in solutions]
        sv_mask = np.column_stack([(a[:, 0] + a[:, 1]) > 0 for a in A])
        support = np.flatnonzero(sv_mask.any(axis=1)).astype(np.int64)
        coef = np.vstack([y_mat[support, k] * (A[k][support, 0] - A[k][support, 1])
                          for k in range(n_problems)])
        keep, coef = _support_budget(self, Z[support], coef, kernel, seed)
        support = support[keep]
        return dict(support_vectors=Xs[support], dual_coef=coef, support=support,
                    n_support=sv_mask.sum(axis=0).astype(np.int64))

    def _calibrate(self, X, y, seed: int, should_stop: StopFn | None,
                   sample_weight: np.ndarray | None = None) -> None:
        """Platt scaling on out-of-fold decision values (``solver.calibration``)."""
        from solver.calibration import PLATT_FOLDS, fit_platt

        t0 = time.perf_counter()
        with CpuClock() as clock:
            self.platt_ = fit_platt(self, X, y, seed=seed, should_stop=should_stop,
                                    sample_weight=sample_weight)
        self.fit_info_["calibration"] = {
            "method": "platt", "folds": PLATT_FOLDS, "cpu_seconds": clock.seconds,
            "seconds": time.perf_counter() - t0,
            "platt": [{"a": float(a), "b": float(b)} for a, b in self.platt_]}

    def _has_probabilities(self) -> bool:
        return getattr(self, "platt_", None) is not None

    @available_if(_has_probabilities)
    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities ``[n, n_classes]`` (columns in ``classes_`` order); only for
        a model fitted with ``probability=True`` (Platt scaling, ``solver.calibration``)."""
        from solver.calibration import platt_probabilities

        return platt_probabilities(self.decision_function(X), self.platt_)

    def _auto_search(self, Xs, y, auto: tuple[str, ...], gamma_scale: float, seed: int,
                     progress: ProgressFn | None, should_stop: StopFn | None,
                     weights=None):
        """Choose the "auto" parameters by CV with the exact solver (``solver.auto.search``);
        ``weights``: a ``CVWeights`` (None: unweighted)."""
        from solver.auto.search import search

        own = self.get_params(deep=False)
        base = {k: own[k] for k in _CV_PARAMS if k in own}
        base["kernel"], base["scale"], base["random_state"] = self.kernel, False, seed

        def make(values: dict[str, float]) -> ODMBase:
            # a CV tolerance (``values["tol"]``) never tightens the estimator's own
            tol = max(float(base["tol"]), float(values.get("tol", 0.0)))
            return self._cv_estimator(**{**base, **values, "tol": tol})

        fixed = {k: float(own[k]) for k in ("lam", "theta") if k not in auto}
        fixed["gamma"] = float(gamma_scale if own.get("gamma") in ("scale", "auto", None)
                               else own["gamma"])
        report = None
        if progress is not None:
            def report(fraction: float, message: str) -> None:
                progress(fraction, message, {})
        # rows of one kernel solve of the final fit: at most those whose float32 kernel
        # fits cache_size (SODM's level-1 partitions; an exact solve beyond it costs more)
        solve_rows = (None if self.kernel == "linear" else
                      int(math.sqrt(float(own.get("cache_size", 512.0)) * 2**20 / 4)))
        return search(make, Xs, y, linear=self.kernel == "linear", gamma_scale=gamma_scale,
                      fixed=fixed, auto=auto, seed=seed, solve_rows=solve_rows,
                      should_stop=should_stop, progress=report, weights=weights)

    def _cv_weights(self, fit_weight: np.ndarray | None, sample_weight: np.ndarray | None):
        """The search's ``CVWeights``: the rows' fit weights, their sample weights for the
        score, balanced accuracy when ``class_weight`` is set; None without weights."""
        from solver.auto.search import CVWeights

        balanced = getattr(self, "class_weight", None) is not None
        if fit_weight is None and sample_weight is None and not balanced:
            return None
        return CVWeights(fit=fit_weight, score=sample_weight, balanced=balanced)

    def _algorithm_for_kernel(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def _solve_problem(self, Z, y, kernel, params, *, seed, Z_val, y_val, progress,
                       should_stop, sample_weight=None):  # pragma: no cover - overridden
        """Solve one binary problem: returns (kind 'alpha'|'w', solution, history, stopped)."""
        raise NotImplementedError

    # -------------------------------------------------------------------------- predict
    def decision_function(self, X) -> np.ndarray:
        """f(x) per problem: shape (n,) for two classes (> 0 means ``classes_[1]``), else
        (n, n_classes) one-vs-rest scores."""
        check_is_fitted(self, "classes_")
        X = self._check_X(X, reset=False)
        F = self._decision_matrix(self._model_space(X))
        return F[:, 0] if len(self.classes_) == 2 else F

    def _decision_matrix(self, Z) -> np.ndarray:
        if self.w_ is not None:
            return np.asarray(Z @ self.w_.T, dtype=np.float64)
        n = Z.shape[0]
        n_sv = self._svz.shape[0]
        out = np.zeros((n, self.dual_coef_.shape[0]))
        if n_sv == 0 or n == 0:
            return out
        from solver.core.kernels import kernel_combination

        return kernel_combination(self._make_kernel(self.gamma_), Z, self._svz,
                                  self.dual_coef_.T)

    def score(self, X, y, sample_weight=None) -> float:
        """Mean accuracy of ``predict(X)`` against y (labels compared as given)."""
        y = np.asarray(y)
        correct = (self.predict(X) == y).astype(np.float64)
        return float(np.average(correct, weights=sample_weight))

    def predict(self, X) -> np.ndarray:
        """Predicted labels (original label values)."""
        F = self.decision_function(X)
        if F.ndim == 1:
            return self.classes_[(F > 0).astype(np.intp)]
        return self.classes_[np.argmax(F, axis=1)]


def _shifted_progress(progress: ProgressFn | None, lo: float, hi: float, prefix: str):
    if progress is None:
        return None

    def inner(fraction: float, message: str, record: dict) -> None:
        progress(lo + (hi - lo) * float(fraction), prefix + message, record)

    return inner


def _support_budget(est: ODMBase, Z_sv, coef: np.ndarray, kernel, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Support vectors kept (indices into ``Z_sv``, model space) and their coefficients:
    all of them, or ``max_support_vectors`` of them with the decision function projected
    onto their span (:func:`solver.exact.reduction.project_support`)."""
    budget = getattr(est, "max_support_vectors", None)
    if budget is None or Z_sv.shape[0] <= int(budget):
        return np.arange(Z_sv.shape[0], dtype=np.int64), coef
    from solver.exact.reduction import project_support

    return project_support(Z_sv, coef, kernel, int(budget), seed)


def _y_matrix(y_idx: np.ndarray, n_problems: int) -> np.ndarray:
    if n_problems == 1:
        return np.where(y_idx == 1, 1.0, -1.0)[:, None]
    return np.where(y_idx[:, None] == np.arange(n_problems)[None, :], 1.0, -1.0)


def _set_state(est: ODMBase, *, classes, n_features_in, scaler, gamma, history, fit_info,
               support_vectors=None, dual_coef=None, support=None, n_support=None, w=None,
               platt=None):
    """Install the fitted attributes (shared by ``fit``, ``build_fitted`` and model loading)."""
    est.classes_ = np.asarray(classes)
    if est.classes_.ndim != 1 or len(est.classes_) < 2:
        raise ValueError("classes must be a 1-d array of at least two labels")
    if len(np.unique(est.classes_)) != len(est.classes_) or np.any(
            est.classes_[1:] < est.classes_[:-1]):
        raise ValueError("classes must be sorted and distinct")
    est.n_features_in_ = int(n_features_in)
    est._scaler = scaler
    est.gamma_ = float(gamma)
    est.history_ = list(history)
    est.fit_info_ = dict(fit_info)
    # lam_ / theta_: the values the model was fitted with ("auto" resolved by the search)
    resolved = est.fit_info_.get("params") or {}
    for name in ("lam", "theta"):
        value = resolved.get(name, getattr(est, name))
        setattr(est, f"{name}_", None if value == "auto" else float(value))
    n_problems = 1 if len(est.classes_) == 2 else len(est.classes_)
    # n_iter_[k]: DCD epochs (exact ODM) or levels / epochs run (SODM) of problem k.
    est.n_iter_ = np.asarray(est.fit_info_.get("n_iter") or [1] * n_problems, dtype=np.int64)
    est.w_ = None if w is None else np.asarray(w, dtype=np.float64)
    est._svz = None
    est.support_vectors_ = None
    if support_vectors is not None:
        # Keep the rows once, in the solver's space (constant column appended when
        # fit_intercept); support_vectors_ is the scaled-feature part of them.
        d = int(n_features_in)
        if sp.issparse(support_vectors):
            sv = sp.csr_matrix(support_vectors, dtype=np.float64)
            sv.sort_indices()
        else:
            sv = np.ascontiguousarray(support_vectors, dtype=np.float64)
        if sv.ndim != 2 or sv.shape[1] != d:
            raise ValueError(f"support_vectors must have {d} columns, got shape {sv.shape}")
        est._svz = append_constant(sv) if est.fit_intercept else sv
        est.support_vectors_ = est._svz[:, :d] if est.fit_intercept else est._svz
    est.dual_coef_ = None if dual_coef is None else np.asarray(dual_coef, dtype=np.float64)
    est.support_ = (np.zeros(0, np.int64) if support is None
                    else np.asarray(support, dtype=np.int64))
    est.n_support_ = np.asarray(n_support if n_support is not None else [], dtype=np.int64)
    est.platt_ = None if platt is None else np.asarray(platt, dtype=np.float64)
    if est.w_ is not None:
        d_model = est.n_features_in_ + (1 if est.fit_intercept else 0)
        if est.w_.shape != (n_problems, d_model):
            raise ValueError(f"w has shape {est.w_.shape}, expected {(n_problems, d_model)}")
    else:
        if support_vectors is None or est.dual_coef_ is None:
            raise ValueError("a kernel model needs support_vectors and dual_coef")
        if est.dual_coef_.shape != (n_problems, est._svz.shape[0]):
            raise ValueError(f"dual_coef has shape {est.dual_coef_.shape}, expected "
                             f"{(n_problems, est._svz.shape[0])}")
    if est.n_support_.shape != (n_problems,):
        raise ValueError(f"n_support has shape {est.n_support_.shape}, expected {(n_problems,)}")
    if est.platt_ is not None and est.platt_.shape != (n_problems, 2):
        raise ValueError(f"platt has shape {est.platt_.shape}, expected {(n_problems, 2)}")


def build_fitted(est: ODMBase, *, classes, n_features_in: int, scaler_min=None,
                 scaler_scale=None, gamma: float = 1.0, support_vectors=None, dual_coef=None,
                 support=None, n_support=None, w=None, history=(), fit_info=None,
                 platt=None) -> ODMBase:
    """Turn an unfitted estimator (its parameters) plus a solution into a fitted one.

    For other training backends (Spark) and model loading. Arrays are in the model's feature
    space: ``support_vectors`` are the scaled rows (without the constant column), ``w`` has the
    intercept weight last when ``fit_intercept``. ``scaler_min/scaler_scale`` are required iff
    ``est.scale``. Binary: one problem whose positive class is ``classes[1]``.
    """
    est.validate_params()
    if est.scale:
        if scaler_min is None or scaler_scale is None:
            raise ValueError("scale=True needs scaler_min and scaler_scale")
        scaler = MinMaxScaler(min_=np.asarray(scaler_min, dtype=np.float64),
                              scale_=np.asarray(scaler_scale, dtype=np.float64))
        if scaler.n_features != int(n_features_in) or scaler.scale_.shape != scaler.min_.shape:
            raise ValueError("scaler arrays do not match n_features_in")
    else:
        scaler = None
    if w is None and support_vectors is not None and dual_coef is not None:
        # the support-vector budget, as fit applies it (a loaded model is within it already)
        Z_sv = append_constant(support_vectors) if est.fit_intercept else support_vectors
        keep, dual_coef = _support_budget(est, Z_sv, np.asarray(dual_coef, dtype=np.float64),
                                          est._make_kernel(gamma), seed_for(est.random_state))
        if keep.size < Z_sv.shape[0]:
            support_vectors = support_vectors[keep]
            support = None if support is None else np.asarray(support)[keep]
    _set_state(est, classes=classes, n_features_in=n_features_in, scaler=scaler, gamma=gamma,
               history=history, fit_info=fit_info or {}, support_vectors=support_vectors,
               dual_coef=dual_coef, support=support, n_support=n_support, w=w,
               platt=platt)
    return est

