"""scikit-learn's estimator checks on both estimators (small, fast settings).

Excluded checks (``expected_failed_checks``) and why:

* ``SODMClassifier`` and the partitioned baselines (Ca-, DiP-, DC-ODM), every estimator with a
  ``warm_start`` parameter: ``check_fit_idempotent``, ``check_fit_check_is_fitted``,
  ``check_n_features_in``, ``check_n_features_in_after_fitting``. These checks call
  ``set_params(warm_start=False)`` because in scikit-learn ``warm_start`` is a bool meaning
  "reuse the previous fit". In SODM (issue text, paper section 2.7) ``warm_start`` chooses how
  the concatenated duals seed the next level: ``"rescale"`` or ``"literal"``, so ``False`` is
  rejected as an invalid value. The checks themselves are run below on a subclass that ignores
  that one ``set_params`` call (``test_checks_that_set_a_boolean_warm_start``), so the
  behaviour they test is still covered.

``check_array_api_input`` is not run: it only applies to estimators that declare array-API
support (it skips itself otherwise). The solvers are numpy/numba code, so instead of letting
it skip, the test asserts that the estimators do not claim that support.
"""

from __future__ import annotations

import pytest
from sklearn.utils import estimator_checks
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
# Estimators whose string warm_start collides with scikit-learn's boolean one.
WARM_START_CASES = [
    (SODMClassifier, SODM_RBF),
    (SODMClassifier, SODM_LINEAR),
    (BASELINES["cascade"], dict(levels=1, random_state=0)),
    (BASELINES["dip"], dict(levels=1, random_state=0)),
    (BASELINES["dc"], dict(levels=1, random_state=0)),
]

_BOOL_WARM_START = (
    "this warm_start is SODM's level warm-start scaling ('rescale'|'literal'), not "
    "scikit-learn's boolean warm_start that this check sets to False; run separately in "
    "test_checks_that_set_a_boolean_warm_start"
)
WARM_START_EXPECTED_FAILED = {
    "check_fit_idempotent": _BOOL_WARM_START,
    "check_fit_check_is_fitted": _BOOL_WARM_START,
    "check_n_features_in": _BOOL_WARM_START,
    "check_n_features_in_after_fitting": _BOOL_WARM_START,
}


def _expected_failed(estimator) -> dict[str, str]:
    if "warm_start" in estimator.get_params():
        return dict(WARM_START_EXPECTED_FAILED)
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed)
def test_sklearn_compatible(estimator, check):
    name = getattr(check, "func", check).__name__
    if name == "check_array_api_input":
        assert estimator.__sklearn_tags__().array_api_support is False
        return
    check(estimator)


def _ignoring_bool_warm_start(cls):
    """A subclass of ``cls`` that drops scikit-learn's ``set_params(warm_start=False)``."""

    def set_params(self, **params):
        if params.get("warm_start") is False:
            params.pop("warm_start")
        return cls.set_params(self, **params)

    return type(cls.__name__, (cls,), {"set_params": set_params})


@pytest.mark.parametrize(("cls", "params"), WARM_START_CASES,
                         ids=["sodm-rbf", "sodm-linear", "cascade", "dip", "dc"])
@pytest.mark.parametrize("check_name", sorted(WARM_START_EXPECTED_FAILED))
def test_checks_that_set_a_boolean_warm_start(cls, params, check_name):
    check = getattr(estimator_checks, check_name)
    check(cls.__name__, _ignoring_bool_warm_start(cls)(**params))
