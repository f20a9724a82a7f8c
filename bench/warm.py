"""Imported by the benchmark's fork server (``bench.child``): import every method and fit each
once on 80 random rows (one process, ``n_jobs=1``), so the forked tasks inherit loaded numba
code and warmed caches and no method's measured fit pays first-call costs."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from bench.methods import METHODS


def warm_up() -> None:
    """Every compiled loop loaded (a tiny fit calls only some: not the Newton steps'), then
    one tiny fit per method (failures are ignored: the measured run reports them)."""
    from solver import kernel_sums

    kernel_sums.compile_loops()
    rng = np.random.default_rng(0)
    X = rng.random((80, 5))
    y = np.where(X[:, 0] + X[:, 1] > 1.0, 1.0, -1.0)
    params = {"lam": 100.0, "theta": 0.2, "upsilon": 0.5, "gamma_mult": 1.0, "C": 1.0, "d": 5}
    # One thread: an OpenMP (libgomp) pool started here would deadlock every forked task.
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")
        for method in METHODS.values():
            if method.name == "dip-odm" or method.spark:  # k-means runs OpenMP (its solver
                continue  # code is Ca-ODM's); a JVM must not live in the fork server
            with contextlib.suppress(Exception):
                method.make(params, 0, 1).fit(X, y).predict(X)


warm_up()
