"""The service's automatic hyperparameters: ``POST /train`` leaves ``lam``, ``gamma`` and
``theta`` to the estimators' "auto" search (``solver.auto.search``) unless the request sets them.

On both backends: a Spark job's search runs on the worker over the same training rows, so
the same request chooses the same values (``worker.spark.spark_auto``). One exception, where
omitted parameters keep the estimator's fixed defaults and an explicit "auto" is refused
(422 naming the field): a request with ``search`` (a grid search is the user's own tuning,
and an "auto" inside it would run one search per grid point and fold).
"""

from __future__ import annotations

from typing import Any

from solver.auto.search import AUTO, AUTO_PARAMS

__all__ = ["SERVICE_DEFAULTS", "auto_defaults", "auto_conflict"]

# what the API documents as the default of these parameters (GET /algorithms, OpenAPI)
SERVICE_DEFAULTS = {name: AUTO for name in AUTO_PARAMS}


def auto_defaults(estimator_cls: type, params: dict[str, Any], *,
                  searching: bool) -> dict[str, Any]:
    """``params`` plus ``"auto"`` for each of lam / gamma / theta that the estimator has and
    the request leaves out (gamma only for the RBF and polynomial kernels)."""
    out = dict(params)
    if searching:
        return out
    known = estimator_cls().get_params(deep=False)
    kernel = params.get("kernel", known.get("kernel"))
    for name in AUTO_PARAMS:
        if name in known and name not in params and not (name == "gamma"
                                                         and kernel == "linear"):
            out[name] = AUTO
    return out


def auto_conflict(params: dict[str, Any], *,
                  grid: dict[str, list[Any]] | None) -> tuple[str, str] | None:
    """``(field, message)`` when "auto" is asked where it cannot run, else None."""
    autos = [k for k in AUTO_PARAMS if params.get(k) == AUTO]
    if grid is not None:
        if autos:
            return (f"params.{autos[0]}", f"{autos[0]}='auto' is a search of its own; give "
                    "a value or leave out the grid search")
        for key, values in grid.items():
            if any(v == AUTO for v in values):
                return (f"search.grid.{key}", "'auto' cannot be a grid value")
    return None
