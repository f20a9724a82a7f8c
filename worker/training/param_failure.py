"""A fit that failed on its parameters, as the problem its job shows (422 ``invalid-params``
naming ``params.<name>`` and its value), instead of an "internal error".

The solver's ``InvalidParameterError`` raised during the fit (a check that needs the data,
such as a polynomial kernel past its range on unscaled rows or with a gamma taken from the
data) names its parameter. A float64 overflow or a division by zero (``ArithmeticError``: a
diverged SVRG, ``inf`` where an integer was due) or a fitted model with non-finite
coefficients names the job's most extreme numeric parameter: the one furthest from 1 in
decades (``theta`` by how close ``1 - theta`` is to 0, since ``(1-theta)^2`` divides).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from app.core.problems import ProblemError
from solver.exceptions import InvalidParameterError

# the numeric parameters whose magnitude can carry a fit out of float64's range
SCALED = ("lam", "upsilon", "theta", "gamma", "coef0", "step_size")


class NonFiniteModel(FloatingPointError):
    """The fit ended with coefficients that are not finite numbers."""


def is_parameter_failure(exc: BaseException) -> bool:
    return isinstance(exc, InvalidParameterError | ArithmeticError)


def require_finite(est: Any) -> None:
    """Raise ``NonFiniteModel`` when a fitted estimator's weights or dual coefficients hold
    a NaN or an infinity (a fit that overflowed without raising)."""
    for name in ("w_", "dual_coef_"):
        value = getattr(est, name, None)
        if value is not None and not np.isfinite(np.asarray(value, dtype=np.float64)).all():
            raise NonFiniteModel(f"the fitted model's {name.rstrip('_')} coefficients are "
                                 "not finite")


def _decades(name: str, value: float) -> float:
    if name == "theta":
        return -2 * math.log10(max(1.0 - value, 1e-300))
    return abs(math.log10(abs(value))) if value else 0.0


def parameter_problem(params: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The problem body of a fit that failed on its parameters (see the module docstring);
    ``params`` are the job's parameters as stored ("auto" ones are not numbers)."""
    if isinstance(exc, InvalidParameterError):
        name: str | None = exc.name
        detail = str(exc)
    else:
        numeric = {k: float(v) for k in SCALED if isinstance(v := params.get(k), int | float)
                   and not isinstance(v, bool) and math.isfinite(v)}
        name = max(numeric, key=lambda k: _decades(k, numeric[k])) if numeric else None
        why = str(exc) if isinstance(exc, FloatingPointError) else \
            "an overflow or a division by zero"
        values = ", ".join(f"{k} = {v:g}" for k, v in numeric.items()) or "its parameters"
        detail = f"the fit left float64's range ({why}) with {values}"
        if name is not None:
            detail += f"; {name} = {numeric[name]:g} is the most extreme: a value nearer " \
                      "its default keeps the fit finite"
    errors = [] if name is None else [{"field": f"params.{name}", "value": params.get(name),
                                       "message": detail}]
    return ProblemError(422, "Invalid training parameters", detail, type="invalid-params",
                        errors=errors).body()
