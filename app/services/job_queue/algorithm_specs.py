"""The algorithm registry: each ``POST /train`` algorithm, its estimator and its parameters.

One ``ParamSpec`` per estimator parameter (type, bounds, accepted words such as ``"scale"``,
the server limit for the ones that cost memory or time, the kernels it applies to, a
description) is the single source of truth: ``params_model`` builds the typed request model
from it (validation and the OpenAPI schema), ``describe`` answers ``GET /algorithms`` (the
dashboard's train form is built from that answer), and ``build_estimator`` constructs the
estimator and turns the solver's ``InvalidParameterError`` into a ``ParamError`` naming the
field. Defaults are read from the estimator classes, never copied.

"sodm" and "odm" are the solver's ``SODMClassifier`` / ``ODMClassifier``; the paper's
baselines ("cascade" Ca-ODM, "dip" DiP-ODM, "dc" DC-ODM, "svrg" ODM-SVRG) are the estimators
of ``solver.estimators``, so their models are ordinary kernel / linear ODM models.
``portable(est)`` re-labels a fitted baseline as an ``ODMClassifier`` with the same kernel
and ODM parameters for the model file (predictions are identical).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from numbers import Integral, Real
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, create_model
from pydantic_core import PydanticCustomError

from app.core.config import get_settings
from app.services.job_queue.autoparams import SERVICE_DEFAULTS
from solver import ODMClassifier, SODMClassifier
from solver.estimators import BASELINE_ESTIMATORS as _BASELINE_ESTIMATORS
from solver.estimators import check_kernel_range
from solver.exceptions import InvalidParameterError

BASELINES = ("cascade", "dip", "dc", "svrg")
KERNELS = ("linear", "rbf", "poly")
# Resolved at the request: ``random_state`` is the request's ``seed``.
SEED_PARAM = "random_state"
# Estimator parameters set from the request's own fields, not from ``params``: the seed, and
# ``class_weight`` (a top-level field of ``POST /train`` next to ``weight_column``).
REQUEST_PARAMS = (SEED_PARAM, "class_weight")


class ParamType(StrEnum):
    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    CHOICE = "choice"


class ParamError(ValueError):
    """A bad hyperparameter; ``field`` names it (e.g. ``params.lam``). Above a server limit,
    ``limit`` and ``setting`` name that limit and its environment variable."""

    def __init__(self, field: str, message: str, *, limit: float | None = None,
                 setting: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.limit = limit
        self.setting = setting

    def error(self) -> dict[str, Any]:
        """The entry of a problem's ``errors`` list."""
        out: dict[str, Any] = {"field": self.field, "message": str(self)}
        if self.limit is not None:
            out.update(type="limit_exceeded", limit=self.limit, setting=self.setting)
        return out


@dataclass(frozen=True)
class ParamSpec:
    """One estimator parameter as the API accepts it.

    ``minimum``/``maximum`` are inclusive bounds, ``exclusive_minimum``/``exclusive_maximum``
    strict ones; ``words`` are strings accepted besides a number (``"scale"``, ``"auto"``);
    ``nullable``: ``null`` lets the solver choose; ``limit`` is the ``Settings`` attribute
    holding this server's maximum (a 422 naming it above); ``kernels`` lists the kernels the
    parameter matters for (empty: all); ``advanced`` ones are folded away in the dashboard.
    """

    name: str
    type: ParamType
    description: str
    default: Any = None
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    exclusive_maximum: float | None = None
    choices: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    nullable: bool = False
    nonzero: bool = False
    limit: str | None = None
    kernels: tuple[str, ...] = ()
    advanced: bool = False

    # ------------------------------------------------------------------ limits
    def limit_value(self) -> float | None:
        return None if self.limit is None else getattr(get_settings(), self.limit)

    def limit_setting(self) -> str | None:
        """The environment variable of the limit (``SODM_LIMIT_N_JOBS``)."""
        if self.limit is None:
            return None
        return get_settings().__class__.model_fields[self.limit].alias

    # -------------------------------------------------------------- validation
    def what(self) -> str:
        """What a valid value is, in words (used in error messages)."""
        if self.type is ParamType.BOOLEAN:
            parts = ["true or false"]
        elif self.type is ParamType.CHOICE:
            parts = ["one of " + ", ".join(repr(c) for c in self.choices)]
        else:
            kind = "an integer" if self.type is ParamType.INTEGER else "a number"
            bounds = [f">= {_num(self.minimum)}" if self.minimum is not None else "",
                      f"> {_num(self.exclusive_minimum)}"
                      if self.exclusive_minimum is not None else "",
                      f"<= {_num(self.maximum)}" if self.maximum is not None else "",
                      f"< {_num(self.exclusive_maximum)}"
                      if self.exclusive_maximum is not None else "",
                      "not 0" if self.nonzero else ""]
            parts = [" ".join([kind, ", ".join(b for b in bounds if b)]).strip()]
        parts += [repr(w) for w in self.words]
        if self.nullable:
            parts.append("null")
        return " or ".join(parts)

    def check(self, value: Any) -> Any:
        """The value if valid; raises ``PydanticCustomError`` (``invalid_parameter`` or
        ``limit_exceeded`` with the limit and its setting) otherwise."""
        if value is None and self.nullable:
            return None
        if isinstance(value, str) and value in self.words:
            return value
        if self._valid(value):
            limit = self.limit_value()
            if limit is not None and value > limit:
                setting = self.limit_setting()
                raise PydanticCustomError(
                    "limit_exceeded",
                    "{value} is above this server's limit of {limit} for {name} ({setting})",
                    {"value": value, "limit": _num(limit), "name": self.name,
                     "setting": setting})
            return float(value) if self.type is ParamType.NUMBER else value
        raise PydanticCustomError("invalid_parameter", "{name} must be {what}, got {value}",
                                  {"name": self.name, "what": self.what(),
                                   "value": repr(value)[:100]})

    def _valid(self, v: Any) -> bool:
        if self.type is ParamType.BOOLEAN:
            return isinstance(v, bool)
        if self.type is ParamType.CHOICE:
            return isinstance(v, str) and v in self.choices
        if isinstance(v, bool) or not isinstance(v, Real):
            return False
        if self.type is ParamType.INTEGER and not isinstance(v, Integral):
            return False
        if not math.isfinite(float(v)):
            return False
        return not ((self.minimum is not None and v < self.minimum)
                    or (self.exclusive_minimum is not None and v <= self.exclusive_minimum)
                    or (self.maximum is not None and v > self.maximum)
                    or (self.exclusive_maximum is not None and v >= self.exclusive_maximum)
                    or (self.nonzero and v == 0))

    # ------------------------------------------------------------- JSON schema
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the accepted values (the server's current limit included)."""
        if self.type is ParamType.BOOLEAN:
            main: dict[str, Any] = {"type": "boolean"}
        elif self.type is ParamType.CHOICE:
            main = {"type": "string", "enum": list(self.choices)}
        else:
            main = {"type": self.type.value}
            for key, v in (("minimum", self.minimum),
                           ("exclusiveMinimum", self.exclusive_minimum),
                           ("maximum", self.maximum),
                           ("exclusiveMaximum", self.exclusive_maximum)):
                if v is not None:
                    main[key] = v
            limit = self.limit_value()
            if limit is not None:
                main["maximum"] = min(limit, main.get("maximum", limit))
        branches = [main]
        if self.words:
            branches.append({"type": "string", "enum": list(self.words)})
        if self.nullable:
            branches.append({"type": "null"})
        return main if len(branches) == 1 else {"anyOf": branches}

    def describe(self) -> dict[str, Any]:
        """The parameter as ``GET /algorithms`` lists it."""
        limit = self.limit_value()
        return {
            "name": self.name, "type": self.type.value, "default": self.default,
            "description": self.description, "minimum": self.minimum,
            "exclusive_minimum": self.exclusive_minimum, "maximum": self.maximum,
            "exclusive_maximum": self.exclusive_maximum, "choices": list(self.choices),
            "words": list(self.words), "nullable": self.nullable,
            "limit": None if limit is None else {"value": _num(limit),
                                                 "setting": self.limit_setting()},
            "kernels": list(self.kernels), "advanced": self.advanced,
            "schema": self.json_schema(),
        }


def _num(v: float | None) -> float | int | None:
    return int(v) if isinstance(v, float) and v.is_integer() else v


_N, _I, _B, _C = ParamType.NUMBER, ParamType.INTEGER, ParamType.BOOLEAN, ParamType.CHOICE
_KERNELISED = ("rbf", "poly")

# Every parameter of every estimator (the defaults come from the estimator classes).
PARAMS: dict[str, ParamSpec] = {s.name: s for s in (
    ParamSpec("kernel", _C, "Kernel: linear, rbf exp(-gamma ||x-z||^2) or poly "
              "(gamma x.z + coef0)^degree.", choices=KERNELS),
    ParamSpec("lam", _N, "Weight of the margin loss against the model complexity 1/2 ||w||^2 "
              "(the paper's lambda; plays the role of C times the number of rows). \"auto\" "
              "(the default): chosen by cross-validation on the training data; 1000 when "
              "left out on the Spark backend or with a grid search.", minimum=1e-12,
              maximum=1e12, words=("auto",)),
    ParamSpec("upsilon", _N, "Relative weight of margins above the zero-loss band versus "
              "below it.", minimum=1e-12, maximum=1e12),
    ParamSpec("theta", _N, "Half-width of the zero-loss band [1-theta, 1+theta] of the "
              "margins. \"auto\" (the default): chosen by cross-validation; 0.2 when left "
              "out on the Spark backend or with a grid search.", minimum=0,
              exclusive_maximum=1, words=("auto",)),
    ParamSpec("gamma", _N, "Kernel width for rbf and poly: a number, \"scale\" = 1 / "
              "(features x variance of the scaled X), or \"auto\" (the default: chosen by "
              "cross-validation; \"scale\" when left out on the Spark backend or with a grid "
              "search).", exclusive_minimum=0, maximum=1e12, words=("scale", "auto"),
              kernels=_KERNELISED),
    ParamSpec("degree", _I, "Degree of the polynomial kernel.", minimum=1,
              limit="limit_degree", kernels=("poly",)),
    ParamSpec("coef0", _N, "Offset of the polynomial kernel.", minimum=-1e12, maximum=1e12,
              kernels=("poly",), advanced=True),
    ParamSpec("tol", _N, "Stopping tolerance: the KKT violation of a dual solve, or the "
              "gradient norm relative to its start for the SVRG solvers.", exclusive_minimum=0,
              advanced=True),
    ParamSpec("max_iter", _I, "Epoch cap of each dual coordinate descent solve.", minimum=1,
              limit="limit_max_iter", advanced=True),
    ParamSpec("cache_size", _N, "Kernel cache of each solve, in megabytes (the memory a "
              "kernel solve may use).", exclusive_minimum=0, limit="limit_cache_size",
              kernels=_KERNELISED, advanced=True),
    ParamSpec("max_support_vectors", _I, "Support-vector budget of a kernel model: at most "
              "this many support vectors, drawn at random, with the decision function "
              "projected onto them (smaller model, faster predictions). null: no budget.",
              minimum=1, nullable=True, limit="limit_max_support_vectors",
              kernels=_KERNELISED, advanced=True),
    ParamSpec("shrinking", _B, "Drop bounded variables from the coordinate descent passes.",
              advanced=True),
    ParamSpec("fit_intercept", _B, "Append a constant feature (a bias term).", advanced=True),
    ParamSpec("scale", _B, "Min-max scale every feature to [0, 1] on the training data "
              "(inside the model).", advanced=True),
    ParamSpec("p", _I, "Partitions merged into one at each level; the finest level has "
              "p^levels partitions. null: the fewest whose kernels fit the cache.", minimum=2,
              nullable=True, limit="limit_p", kernels=_KERNELISED),
    ParamSpec("levels", _I, "Merge levels below the global solve (more levels: more, smaller "
              "partitions). null: chosen from the data size.", minimum=0, nullable=True,
              limit="limit_levels", kernels=_KERNELISED),
    ParamSpec("n_strata", _I, "Strata (landmark clusters) the partitions are drawn from. null: "
              "automatic.", minimum=1, nullable=True, limit="limit_n_strata", advanced=True),
    ParamSpec("landmark_candidates", _I, "Rows the landmarks are chosen from. null: 20,000.",
              minimum=1, nullable=True, limit="limit_landmark_candidates", advanced=True),
    ParamSpec("warm_start_scaling", _C, "How a level's duals warm-start the next: \"rescale\" "
              "or the paper's \"literal\" concatenation.", choices=("rescale", "literal"),
              kernels=_KERNELISED, advanced=True),
    ParamSpec("final_global_solve", _B, "Finish with one exact solve on all the data, "
              "warm-started from level 1. null: the solver's default.", nullable=True,
              kernels=_KERNELISED, advanced=True),
    ParamSpec("n_jobs", _I, "Processes solving partitions at the same time (-1: all the "
              "worker's cores; not 0).", minimum=-1, nonzero=True, nullable=True,
              limit="limit_n_jobs", kernels=_KERNELISED),
    ParamSpec("epochs", _I, "Passes of the SVRG solver (linear kernel). null: its default.",
              minimum=1, nullable=True, limit="limit_epochs", kernels=("linear",)),
    ParamSpec("step_size", _N, "SVRG step size. null: derived from the smoothness constant.",
              exclusive_minimum=0, exclusive_maximum=1, nullable=True, kernels=("linear",),
              advanced=True),
    ParamSpec("n_partitions", _I, "Partitions of the distributed SVRG solver (linear). null: "
              "partitions of at least 2,000 rows.", minimum=1, nullable=True,
              limit="limit_n_partitions", kernels=("linear",), advanced=True),
    ParamSpec("linear_solver", _C, "Linear kernel: distributed SVRG (\"dsvrg\", Algorithm 2) "
              "or the hierarchical partitions of the kernel case.",
              choices=("dsvrg", "hierarchical"), kernels=("linear",), advanced=True),
    ParamSpec("n_clusters", _I, "k-means clusters that DiP-ODM spreads over the partitions.",
              minimum=1, limit="limit_n_clusters"),
    ParamSpec("fanout", _I, "DC-ODM: fanout^level kernel k-means clusters at each level.",
              minimum=2, limit="limit_fanout"),
    ParamSpec("sample_size", _I, "DC-ODM: rows sampled for kernel k-means.", minimum=1,
              limit="limit_sample_size", advanced=True),
    ParamSpec("inner_steps", _I, "SVRG inner steps per epoch. null: the number of rows.",
              minimum=1, nullable=True, limit="limit_inner_steps", advanced=True),
    ParamSpec("probability", _B, "Fit Platt's sigmoid on held-out decision values (3-fold "
              "cross-validation, about twice the training time) so /predict also returns "
              "class probabilities; their calibration error is in the model's metrics."),
)}


@dataclass(frozen=True)
class Algorithm:
    """A trainable algorithm: its estimator, backends and parameters (``params`` carry the
    estimator's defaults; ``overrides`` adjust a shared spec for this algorithm)."""

    name: str
    title: str
    description: str
    estimator: type
    backends: tuple[str, ...] = ("local",)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def params(self) -> tuple[ParamSpec, ...]:
        return _params_of(self.name)

    def spec(self, name: str) -> ParamSpec | None:
        return next((s for s in self.params if s.name == name), None)


@cache
def _params_of(name: str) -> tuple[ParamSpec, ...]:
    alg = ALGORITHMS[name]
    # the service's defaults: lam / gamma / theta left out are "auto"
    # (app.services.job_queue.autoparams)
    defaults = alg.estimator().get_params(deep=False)
    defaults.update({k: v for k, v in SERVICE_DEFAULTS.items() if k in defaults})
    return tuple(dataclasses.replace(spec, default=defaults[name],
                                     **alg.overrides.get(name, {}))
                 for name, spec in PARAMS.items() if name in defaults)


ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("sodm", "SODM", "Scalable ODM (Wang et al., IJCAI-23): stratified partitions "
              "solved in parallel and merged level by level (kernels), distributed SVRG on "
              "the primal (linear kernel).", SODMClassifier, backends=("local", "spark")),
    Algorithm("odm", "ODM", "Exact ODM: one dual coordinate descent solve on all the data.",
              ODMClassifier),
    Algorithm("cascade", "Ca-ODM", "Baseline: a cascade of partition solvers (Graf et al. "
              "2004) over 2^levels random partitions.", _BASELINE_ESTIMATORS["cascade"]),
    Algorithm("dip", "DiP-ODM", "Baseline: partitions that preserve k-means clusters (Singh "
              "et al. 2017).", _BASELINE_ESTIMATORS["dip"]),
    Algorithm("dc", "DC-ODM", "Baseline: kernel k-means partitions, then a warm-started "
              "global solve (Hsieh et al. 2014).", _BASELINE_ESTIMATORS["dc"]),
    Algorithm("svrg", "ODM-SVRG", "Baseline: single-machine SVRG on the linear ODM primal.",
              _BASELINE_ESTIMATORS["svrg"], overrides={"kernel": {"choices": ("linear",)}}),
)}
ALGORITHM_NAMES = tuple(ALGORITHMS)

# Name -> estimator class (kept for callers that only need the class).
ESTIMATORS: dict[str, type] = {name: a.estimator for name, a in ALGORITHMS.items()}

# Fitted attributes that define a model (copied by ``portable``).
_FITTED = ("classes_", "n_features_in_", "_scaler", "gamma_", "history_", "fit_info_",
           "n_iter_", "w_", "_svz", "support_vectors_", "dual_coef_", "support_",
           "n_support_")


def algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ParamError("algorithm", f"unknown algorithm {name!r}; one of "
                                      f"{list(ALGORITHM_NAMES)}")
    return ALGORITHMS[name]


# ------------------------------------------------------------------- request models
def _class_name(name: str) -> str:
    return {"sodm": "SODM", "odm": "ODM", "cascade": "Cascade", "dip": "DiP", "dc": "DC",
            "svrg": "SVRG"}.get(name, name.capitalize())


def _field(spec: ParamSpec) -> tuple[Any, Any]:
    def schema_extra(schema: dict[str, Any]) -> None:
        schema.update(spec.json_schema())

    annotation = Annotated[Any, PlainValidator(spec.check)]
    return annotation, Field(default=spec.default, title=spec.name,
                             description=spec.description, json_schema_extra=schema_extra)


@cache
def params_model(name: str) -> type[BaseModel]:
    """The typed ``params`` object of an algorithm (unknown keys: 422 naming them)."""
    alg = algorithm(name)
    fields = {s.name: _field(s) for s in alg.params}
    return create_model(f"{_class_name(name)}Params",
                        __config__=ConfigDict(extra="forbid"),
                        __doc__=f"Parameters of {alg.title}; a key left out takes its default "
                                "(null: the solver chooses).", **fields)


def describe() -> list[dict[str, Any]]:
    """Every algorithm with its parameters (``GET /algorithms``)."""
    return [{"name": a.name, "title": a.title, "description": a.description,
             "backends": list(a.backends), "params": [s.describe() for s in a.params]}
            for a in ALGORITHMS.values()]


# ------------------------------------------------------------------------ estimators
def estimator_class(name: str) -> type:
    return algorithm(name).estimator


def build_estimator(name: str, params: dict[str, Any], seed: int) -> Any:
    """Construct and validate an estimator; raises ``ParamError`` naming the bad field.

    ``params`` are checked against the specs first (the request model already did that for
    ``POST /train``), then by the estimator itself (its cross-parameter rules); the
    solver's ``InvalidParameterError`` carries the parameter's name. ``random_state`` is
    ``seed``, so a job equals the library's own fit with the same parameters.
    """
    alg = algorithm(name)
    params = dict(params)
    seed = params.pop(SEED_PARAM, seed)  # jobs stored before seed was the only knob
    known = [s.name for s in alg.params]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ParamError(f"params.{unknown[0]}",
                         f"unknown parameter(s) {unknown} for {name}; known: {sorted(known)}")
    for key, value in params.items():
        try:
            alg.spec(key).check(value)
        except PydanticCustomError as exc:
            ctx = exc.context or {}
            raise ParamError(f"params.{key}", exc.message(), limit=ctx.get("limit"),
                             setting=ctx.get("setting")) from exc
    est = alg.estimator(**{**params, SEED_PARAM: seed})
    try:
        est.validate_params()
    except InvalidParameterError as exc:
        raise ParamError(f"params.{exc.name}", str(exc)) from exc
    return est


def check_for_data(name: str, params: dict[str, Any], n_features: int) -> None:
    """What the estimator's own checks cannot know before it sees the data, asked before a
    job is queued: a polynomial kernel's values on the min-max scaled rows (features in
    [0, 1], so ``|x|^2 <= n_features`` plus the constant column) stay in the solver's range
    (``solver.estimators.check_kernel_range``). ``ParamError`` naming the field. Unscaled
    rows or a gamma taken from the data ("scale", "auto") are checked by the fit itself."""
    p = build_estimator(name, params, 0).get_params(deep=False)
    if p.get("kernel") != "poly" or not p.get("scale") or isinstance(p.get("gamma"), str):
        return
    from solver.core.kernels import Kernel

    kernel = Kernel("poly", gamma=float(p["gamma"]), degree=int(p["degree"]),
                    coef0=float(p["coef0"]))
    try:
        check_kernel_range(kernel, float(n_features + (1 if p.get("fit_intercept") else 0)))
    except InvalidParameterError as exc:
        raise ParamError(f"params.{exc.name}", str(exc)) from exc


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
