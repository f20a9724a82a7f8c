"""ODM-SVRG: single-machine SVRG (Johnson & Zhang, NeurIPS 2013) on the linear ODM primal.

Each epoch: snapshot ``w~``, full gradient ``h`` over all rows, then ``inner_steps`` (default
``2 M``, the original paper's choice) steps on rows drawn uniformly *with* replacement by
``default_rng(SeedSequence([seed, epoch]))``; the new snapshot is the last iterate (option I).
Same gradient, compiled inner loop and default step size as :mod:`solver.linear.dsvrg`, so the two
differ only in the sampling scheme (no partitions, no strata).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from solver.core.formulation import ODMParams, primal_objective_from_margins
from solver.core.inputs import check_Xy
from solver.linear.dsvrg import (
    DEFAULT_EPOCHS,
    LinearResult,
    default_step_size,
    full_gradient,
    normalized_weights,
    svrg_inner,
    validation_accuracy,
)

__all__ = ["odm_svrg"]


def odm_svrg(X, y, params: ODMParams, *, epochs: int | None = None,
             step_size: float | None = None, inner_steps: int | None = None,
             tol: float = 1e-6, random_state=None, X_val=None, y_val=None,
             progress: Callable | None = None,
             should_stop: Callable[[], bool] | None = None,
             sample_weight: np.ndarray | None = None) -> LinearResult:
    """Single-machine SVRG for the linear ODM; ``y`` in {-1, +1}; returns ``w``.
    ``sample_weight`` weights each row's loss (``solver.linear.dsvrg.normalized_weights``)."""
    params.validate()
    X, y = check_Xy(X, y)
    M, d = X.shape
    sw = normalized_weights(sample_weight, M)
    E = DEFAULT_EPOCHS if epochs is None else int(epochs)
    T = 2 * M if inner_steps is None else int(inner_steps)
    seed = 0 if random_state is None else int(random_state)
    eta = default_step_size(X, params, sw) if step_size is None else float(step_size)
    w = np.zeros(d)
    res = LinearResult(w=w, step_size=eta)
    if M == 0:
        return res
    h = full_gradient(X, y, w, params, sw=sw)
    g0 = max(float(np.linalg.norm(h)), 1e-300)
    t_start = time.perf_counter()
    for e in range(1, E + 1):
        if should_stop is not None and should_stop():
            res.stopped = True
            break
        t0 = time.perf_counter()
        idx = np.random.default_rng(np.random.SeedSequence([seed, e])).integers(0, M, T)
        w, stopped = svrg_inner(X, y, w, h, [idx], eta, params, should_stop, sw=sw)
        h = full_gradient(X, y, w, params, sw=sw)
        gn = float(np.linalg.norm(h))
        rec = {"epoch": e, "objective": primal_objective_from_margins(
                   w, y * np.asarray(X @ w).ravel(), params, sample_weight=sw),
               "grad_norm": gn, "seconds": time.perf_counter() - t0,
               "elapsed": time.perf_counter() - t_start}
        if X_val is not None and y_val is not None:
            rec["val_accuracy"] = validation_accuracy(w, X_val, np.asarray(y_val, np.float64))
        res.history.append(rec)
        res.w = w
        if progress is not None:
            progress(e / E, f"epoch {e}/{E}", rec)
        if stopped:
            res.stopped = True
            break
        if gn <= tol * g0:
            res.converged = True
            break
    res.w = w
    return res
