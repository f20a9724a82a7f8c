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
from solver.estimators import BASELINE_ESTIMATORS as BASELINES

# ``tol``: the weight checks compare a fit with integer ``sample_weight`` against one on the
# rows repeated, to rtol 1e-7, which only the two optima agree to (the ODM with weights is the
# ODM of the repeated rows, ``solver.core.formulation``), so every solver runs to a tight tolerance.
# SODM's kernel model ends with the global solve for the same reason (its partitions of 15
# weighted rows and of their repetitions differ); the SVRG solvers get a small ``lam`` (a
# well-conditioned primal) to reach that tolerance within their epochs.
TOL = 1e-10
SODM_RBF = dict(kernel="rbf", p=2, levels=1, n_strata=2, max_iter=2000, random_state=0,
                final_global_solve=True, tol=TOL)
SODM_LINEAR = dict(kernel="linear", max_iter=200, random_state=0, tol=TOL, epochs=2000, lam=10.0)

ESTIMATORS = [
    ODMClassifier(kernel="rbf", max_iter=2000, random_state=0, tol=TOL),
    ODMClassifier(kernel="linear", max_iter=2000, random_state=0, tol=TOL),
    SODMClassifier(**SODM_RBF),
    SODMClassifier(**SODM_LINEAR),
    BASELINES["cascade"](levels=1, max_iter=2000, random_state=0, tol=TOL),
    BASELINES["dip"](levels=1, max_iter=2000, random_state=0, tol=TOL),
    BASELINES["dc"](levels=1, max_iter=2000, random_state=0, tol=TOL),
    BASELINES["svrg"](random_state=0, tol=TOL, epochs=2000, lam=10.0),
]
@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    name = getattr(check, "func", check).__name__
    if name == "check_array_api_input":
        assert estimator.__sklearn_tags__().array_api_support is False
        return
    check(estimator)
