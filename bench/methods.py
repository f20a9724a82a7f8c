"""The benchmark's methods, their hyperparameter families and grids.

Every method belongs to a *family* (the model it trains): ``odm-rbf`` (exact ODM, SODM-RBF,
Ca-ODM, DiP-ODM, DC-ODM all solve the RBF ODM), ``odm-linear`` (exact linear ODM, SODM-linear,
ODM-SVRG), ``svm-rbf`` (scikit-learn SVC = LIBSVM) and ``svm-linear`` (LinearSVC = LIBLINEAR).
The protocol tunes each family once per dataset by 3-fold stratified CV on the same
stratified training subsample, with the family's exact reference solver (ODM dual CD, LIBSVM,
LIBLINEAR), over a grid of comparable size; every method of the family is then fitted with
those values. (On a subsample of <= 3000 rows SODM's default has 0 levels, i.e. it *is* the
exact solver, so tuning SODM by itself would pick the same values.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Kernel memory budget (MB) of every kernel solve: ODM solvers' ``cache_size`` per local solve
# (SODM / baselines with n_jobs=2 hold up to two solves at once) and LIBSVM's ``cache_size``.
CACHE_MB = 1024.0
# Exact kernel ODM only where the whole float64 kernel fits in 2 GB (M**2 * 8 bytes).
EXACT_RBF_MAX_ROWS = 16000


@dataclass(frozen=True)
class Method:
    """One benchmarked trainer."""

    name: str
    label: str
    family: str
    peer: bool
    kernel: bool
    make: Callable[[dict, int, int], Any]  # (hyperparameters, seed, n_jobs) -> estimator
    max_train: int | None = None  # skip (memory budget) above this many training rows
    spark: bool = False  # starts a Spark session (never in the warmed-up fork server)


def _gamma(params: dict, d: int) -> float:
    return float(params["gamma_mult"]) / d


def _odm_kw(params: dict) -> dict:
    return {k: float(params[k]) for k in ("lam", "upsilon", "theta")}


def _make_odm_rbf(cls_name: str, **extra: Any) -> Callable[[dict, int, int], Any]:
    def make(params: dict, seed: int, n_jobs: int) -> Any:
        import solver
        import solver.baseline_estimators as be

        cls = getattr(solver, cls_name, None) or getattr(be, cls_name)
        kw = dict(kernel="rbf", gamma=_gamma(params, params["d"]), cache_size=CACHE_MB,
                  random_state=seed, **_odm_kw(params), **extra)
        if cls_name != "ODMClassifier":
            kw["n_jobs"] = n_jobs
            if params.get("levels") is not None:  # the partition study sets it
                kw["levels"] = int(params["levels"])
        return cls(**kw)

    return make


def _make_odm_linear(params: dict, seed: int, n_jobs: int) -> Any:
    from solver import ODMClassifier

    return ODMClassifier(kernel="linear", random_state=seed, **_odm_kw(params))


def _make_sodm_linear(params: dict, seed: int, n_jobs: int) -> Any:
    from solver import SODMClassifier

    return SODMClassifier(kernel="linear", random_state=seed, n_jobs=n_jobs, **_odm_kw(params))


def _make_svrg(params: dict, seed: int, n_jobs: int) -> Any:
    from solver.baseline_estimators import SVRGODMClassifier

    return SVRGODMClassifier(random_state=seed, **_odm_kw(params))


def _make_svc(params: dict, seed: int, n_jobs: int) -> Any:
    from sklearn.svm import SVC

    return SVC(C=float(params["C"]), gamma=_gamma(params, params["d"]), cache_size=CACHE_MB)


def _make_linearsvc(params: dict, seed: int, n_jobs: int) -> Any:
    from sklearn.svm import LinearSVC

    return LinearSVC(C=float(params["C"]), random_state=seed, max_iter=5000)


def _make_sodm_rbf_spark(params: dict, seed: int, n_jobs: int) -> Any:
    from bench.spark_methods import SparkSODM

    return SparkSODM(dict(kernel="rbf", gamma=_gamma(params, params["d"]), cache_size=CACHE_MB,
                          **_odm_kw(params)), seed, n_jobs)


def _make_sodm_linear_spark(params: dict, seed: int, n_jobs: int) -> Any:
    from bench.spark_methods import SparkSODM

    return SparkSODM(dict(kernel="linear", **_odm_kw(params)), seed, n_jobs)


def _make_mllib_linearsvc(params: dict, seed: int, n_jobs: int) -> Any:
    from bench.spark_methods import MLlibLinearSVC

    return MLlibLinearSVC(float(params["C"]), n_jobs)


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("odm-rbf", "ODM (exact, RBF)", "odm-rbf", False, True,
           _make_odm_rbf("ODMClassifier"), max_train=EXACT_RBF_MAX_ROWS),
    Method("sodm-rbf", "SODM (RBF)", "odm-rbf", False, True, _make_odm_rbf("SODMClassifier")),
    Method("ca-odm", "Ca-ODM", "odm-rbf", False, True, _make_odm_rbf("CascadeODMClassifier")),
    Method("dip-odm", "DiP-ODM", "odm-rbf", False, True, _make_odm_rbf("DiPODMClassifier")),
    Method("dc-odm", "DC-ODM", "odm-rbf", False, True, _make_odm_rbf("DCODMClassifier")),
    Method("svc", "SVC (LIBSVM, RBF)", "svm-rbf", True, True, _make_svc),
    Method("odm-linear", "ODM (exact, linear)", "odm-linear", False, False,
           _make_odm_linear),
    Method("sodm-linear", "SODM-linear (DSVRG)", "odm-linear", False, False, _make_sodm_linear),
    Method("odm-svrg", "ODM-SVRG", "odm-linear", False, False, _make_svrg),
    Method("linearsvc", "LinearSVC (LIBLINEAR)", "svm-linear", True, False, _make_linearsvc),
    Method("sodm-rbf-spark", "SODM (RBF, Spark local)", "odm-rbf", False, True,
           _make_sodm_rbf_spark, spark=True),
    Method("sodm-linear-spark", "SODM-linear (Spark local)", "odm-linear", False, False,
           _make_sodm_linear_spark, spark=True),
    Method("mllib-linearsvc", "Spark MLlib LinearSVC", "svm-linear", True, False,
           _make_mllib_linearsvc, spark=True),
]}

# The family's reference method: the one its CV runs with.
FAMILY_REFERENCE = {"odm-rbf": "odm-rbf", "odm-linear": "odm-linear", "svm-rbf": "svc",
                    "svm-linear": "linearsvc"}
# Which peer an ODM family is compared with.
FAMILY_PEER = {"odm-rbf": "svc", "odm-linear": "linearsvc"}

# Grids (gamma_mult: RBF gamma = gamma_mult / n_features; features are in [0, 1]).
# upsilon is fixed at 0.5 (the authors' driver value): theta and lam carry the ODM trade-off.
# lam and C step by decades; theta reaches 0.8 (a wide band, few instances outside it: on
# ijcnn1 theta = 0.8 was +0.014 test accuracy over 0.5 at lam = 1e5). ODM has one parameter
# more than SVM, so its grid is larger; the SVM grids span more decades of C to compensate.
GRIDS: dict[str, dict[str, list]] = {
    "odm-rbf": {"lam": [1e2, 1e3, 1e4, 1e5], "gamma_mult": [1.0, 10.0, 100.0],
                "theta": [0.2, 0.5, 0.8], "upsilon": [0.5]},
    "svm-rbf": {"C": [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0, 1e4, 1e5],
                "gamma_mult": [1.0, 10.0, 100.0]},
    "odm-linear": {"lam": [1e1, 1e2, 1e3, 1e4, 1e5, 1e6], "theta": [0.2, 0.5, 0.8],
                   "upsilon": [0.5]},
    "svm-linear": {"C": [0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]},
}
QUICK_GRIDS: dict[str, dict[str, list]] = {
    "odm-rbf": {"lam": [1e2, 1e4], "gamma_mult": [10.0], "theta": [0.2], "upsilon": [0.5]},
    "svm-rbf": {"C": [1.0, 100.0], "gamma_mult": [10.0]},
    "odm-linear": {"lam": [1e2, 1e4], "theta": [0.2], "upsilon": [0.5]},
    "svm-linear": {"C": [0.1, 10.0]},
}


def expand(grid: dict[str, list]) -> list[dict]:
    """Cartesian product of a grid, as a list of parameter dicts."""
    points: list[dict] = [{}]
    for key, values in grid.items():
        points = [{**p, key: v} for p in points for v in values]
    return points
