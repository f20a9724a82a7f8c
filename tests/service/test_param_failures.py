"""``worker.training.param_failure``: a fit that left float64's range is a parameter problem naming
the job's most extreme parameter; a model with non-finite coefficients is such a fit."""

from __future__ import annotations

import numpy as np
import pytest

from solver import ODMClassifier
from solver.exceptions import InvalidParameterError
from worker.training.param_failure import NonFiniteModel, parameter_problem, require_finite


@pytest.mark.parametrize(("params", "field"), [
    ({"lam": 1e12, "upsilon": 0.5, "theta": 0.2, "gamma": "auto"}, "params.lam"),
    ({"lam": 10.0, "upsilon": 1e-11, "theta": 0.2}, "params.upsilon"),
    ({"lam": 10.0, "theta": 0.99999999999, "coef0": 1e6}, "params.theta"),
    ({"kernel": "poly", "coef0": -1e9, "gamma": 1.0}, "params.coef0"),
])
def test_overflow_names_the_most_extreme_parameter(params, field) -> None:
    body = parameter_problem(params, OverflowError("cannot convert float infinity to integer"))
    assert body["status"] == 422 and body["type"].endswith("/invalid-params")
    assert body["errors"][0]["field"] == field
    name = field.removeprefix("params.")
    assert body["errors"][0]["value"] == params[name]
    assert "infinity" not in body["detail"]  # a library's message is not passed on


def test_the_solvers_own_check_names_its_parameter() -> None:
    body = parameter_problem({"coef0": 1e11, "gamma": "scale"},
                             InvalidParameterError("coef0", "the polynomial kernel ..."))
    assert body["errors"] == [{"field": "params.coef0", "value": 1e11,
                               "message": "the polynomial kernel ..."}]
    assert parameter_problem({"gamma": "auto"}, ZeroDivisionError())["errors"] == []


def test_a_model_with_non_finite_coefficients_is_refused() -> None:
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.1, 0.9], [0.9, 0.2]])
    est = ODMClassifier(kernel="linear", lam=10.0).fit(X, np.array([1, -1, 1, -1]))
    require_finite(est)
    est.w_ = est.w_.copy()
    est.w_[0, 0] = np.nan
    with pytest.raises(NonFiniteModel, match="not finite"):
        require_finite(est)
