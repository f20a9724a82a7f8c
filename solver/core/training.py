"""What every training backend (the local estimators, Spark) shares, so that one request
gives the same fitted model on each: seeds, the resolved ``gamma``, the per-problem progress
of one-vs-rest, history records as plain JSON and the ``fit_info`` dictionary."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

from solver.core.row_blocks import EntryMoments, blocks_of
from solver.exceptions import InvalidParameterError

__all__ = ["seed_for", "problem_seed", "overall_variance", "resolve_gamma", "iterations",
           "problem_progress", "fit_info", "plain", "jsonable"]

ProgressFn = Callable[[float, str, dict], None]


def seed_for(random_state: Any) -> int:
    """An int seed from an int / None / RandomState / Generator (ints pass unchanged)."""
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1)[0] & 0x7FFFFFFF)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**31 - 1))
    raise InvalidParameterError("random_state", f"invalid parameter random_state="
                                f"{random_state!r}: int, None or RandomState")


def problem_seed(seed: int, k: int, n_problems: int) -> int:
    """The seed of binary problem ``k``: ``seed`` itself for two classes, else
    ``SeedSequence([seed, k])`` (one-vs-rest)."""
    if n_problems == 1:
        return seed
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0] & 0x7FFFFFFF)


def overall_variance(X: np.ndarray | sp.csr_matrix) -> float:
    """Variance of all entries of X (implicit zeros of CSR included), merged block by block
    (``solver.core.row_blocks``: the number a backend reading the rows in blocks gets too; for
    up to ``BLOCK_ROWS`` rows it is ``np.var``)."""
    moments = EntryMoments()
    for block in blocks_of(X):
        moments.add(block)
    return moments.variance


def weighted_variance(X: np.ndarray | sp.csr_matrix, sample_weight: np.ndarray | None) -> float:
    """Variance of all entries of X with each row counted ``sample_weight_i`` times (what
    :func:`overall_variance` gives on the rows repeated; it is that function without
    weights)."""
    if sample_weight is None:
        return overall_variance(X)
    w = np.asarray(sample_weight, dtype=np.float64)
    total = float(w.sum()) * X.shape[1]
    if total <= 0:
        return 0.0
    if sp.issparse(X):
        s1 = np.asarray(X.sum(axis=1)).ravel()
        s2 = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    else:
        s1, s2 = X.sum(axis=1), np.einsum("ij,ij->i", X, X)
    mean = float(w @ s1) / total
    return max(0.0, float(w @ s2) / total - mean * mean)


def resolve_gamma(kernel: str, gamma: float | str, n_features: int,
                  variance: Callable[[], float]) -> float:
    """The kernel's gamma: 1.0 for the linear kernel, ``1 / (n_features * Var)`` of the
    scaled training features for ``"scale"`` (1.0 when that variance is 0; ``variance`` is
    only called then), else the number given."""
    if kernel == "linear":
        return 1.0
    if gamma == "scale":
        var = variance()
        return 1.0 / (n_features * var) if var > 0 else 1.0
    return float(gamma)


def iterations(history: list[dict]) -> int:
    """``n_iter`` of one problem: epochs of an exact solve, else the levels / epochs run
    (history records)."""
    if len(history) == 1 and "n_iter" in history[0]:
        return max(1, int(history[0]["n_iter"]))
    return max(1, len(history))


def problem_progress(progress: ProgressFn | None, k: int, n: int, label: Any
                     ) -> ProgressFn | None:
    """Progress of problem ``k`` of ``n`` (one-vs-rest) mapped into its share of the fit."""
    if progress is None or n == 1:
        return progress

    name = plain(label)

    def inner(fraction: float, message: str, record: dict) -> None:
        progress((k + float(fraction)) / n, f"class {name!r} ({k + 1}/{n}): {message}", record)

    return inner


def fit_info(*, algorithm: str, n_train: int, n_features: int, sparse_input: bool,
             n_problems: int, seed: int, n_iter: list[int], seconds: float,
             **extra: Any) -> dict[str, Any]:
    """The fitted estimator's ``fit_info_`` (``extra``: backend-specific entries)."""
    return {"algorithm": algorithm, "n_train": int(n_train), "n_features": int(n_features),
            "sparse_input": bool(sparse_input), "n_problems": int(n_problems),
            "seed": int(seed), "n_iter": list(n_iter), "seconds": float(seconds), **extra}


def plain(v: Any) -> Any:
    """numpy scalars -> Python scalars; non-finite floats -> None (JSON has no NaN)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def jsonable(obj: Any) -> Any:
    """A plain-JSON copy of nested dicts / lists / numpy values."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    return plain(obj)
