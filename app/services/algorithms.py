"""Algorithm names of ``POST /train`` -> scikit-learn estimators.

"sodm" and "odm" are the solver's ``SODMClassifier`` / ``ODMClassifier``; the paper's
baselines ("cascade" Ca-ODM, "dip" DiP-ODM, "dc" DC-ODM, "svrg" ODM-SVRG) are the estimators
of ``solver.baseline_estimators`` (the shared estimator machinery: scaling, intercept column,
one-vs-rest, ``should_stop``), so their models are ordinary kernel / linear ODM models.
``portable(est)`` re-labels a fitted baseline as an ``ODMClassifier`` with the same kernel
and ODM parameters for the model file (predictions are identical).
"""

from __future__ import annotations

from typing import Any

from solver import ODMClassifier, SODMClassifier
from solver.baseline_estimators import ESTIMATORS as _BASELINE_ESTIMATORS

BASELINES = ("cascade", "dip", "dc", "svrg")

# Fitted attributes that define a model (copied by ``portable``).
_FITTED = ("classes_", "n_features_in_", "_scaler", "gamma_", "history_", "fit_info_",
           "n_iter_", "w_", "_svz", "support_vectors_", "dual_coef_", "support_",
           "n_support_")

ESTIMATORS: dict[str, type] = {"sodm": SODMClassifier, "odm": ODMClassifier,
                               **_BASELINE_ESTIMATORS}


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
