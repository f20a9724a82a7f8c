"""scikit-learn's estimator checks on both estimators (small, fast settings).

No check is excluded. (SODM's level warm-start option is named ``warm_start_scaling``:
scikit-learn's checks treat a ``warm_start`` parameter as the boolean "reuse the previous
fit" and set it to False.)

``check_array_api_input`` is not run: it only applies to estimators that declare array-API
support (it skips itself otherwise). The solvers are numpy/numba code, so instead of letting
it skip, the test asserts that the estimators do not claim that support.
"""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from solver import ODMClassifier, SODMClassifier
from solver.baseline_estimators import ESTIMATORS as BASELINES

SODM_RBF = dict(kernel="rbf", p=2, levels=1, n_strata=2, max_iter=200, random_state=0)
SODM_LINEAR = dict(kernel="linear", max_iter=200, random_state=0)

ESTIMATORS = [
    ODMClassifier(kernel="rbf", max_iter=200, random_state=0),
    ODMClassifier(kernel="linear", max_iter=200, random_state=0),
    SODMClassifier(**SODM_RBF),
    SODMClassifier(**SODM_LINEAR),
    BASELINES["cascade"](levels=1, max_iter=200, random_state=0),
    BASELINES["dip"](levels=1, max_iter=200, random_state=0),
    BASELINES["dc"](levels=1, max_iter=200, random_state=0),
    BASELINES["svrg"](random_state=0),
]
@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    name = getattr(check, "func", check).__name__
    if name == "check_array_api_input":
        assert estimator.__sklearn_tags__().array_api_support is False
        return
    check(estimator)
