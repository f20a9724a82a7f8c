"""SODM Algorithm 1 against the exact kernel ODM solver on real data (svmguide1)."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from solver.core.formulation import ODMParams, dual_objective
from solver.core.kernels import Kernel, kernel_matrix
from solver.exact import newton_kernel
from solver.exact.dcd_kernel import solve_kernel_dual
from solver.sodm.hierarchy import default_levels, default_p, sodm_kernel
from solver.sodm.parallel import TaskPool
from solver.sodm.partition import local_seed

KERNEL = Kernel("rbf", gamma=1.0)
PARAMS = ODMParams(lam=100.0, upsilon=0.5, theta=0.2)


@pytest.mark.parametrize(("n_rows", "p", "cache_mb", "expected"), [
    (9_999, 2, 512, 0),     # below 2 p * 5000 rows: the exact solver
    (10_000, 2, 512, 1),    # level 1 is always solved
    (32_561, 2, 512, 2),    # a9a: 16,281-row halves do not fit 512 MB in float32, quarters do
    (32_561, 2, 1024, 1),   # ... but the halves fit 1 GB
    (49_990, 2, 1024, 2),   # ijcnn1
    (49_990, 2, 1, 3),      # a tiny cache: bounded by partitions of >= 5000 rows
    (10**9, 2, 1, 10),      # and by 10 levels
    (60_000, 4, 512, 1),    # p = 4: 15,000-row quarters do not fit 512 MB, but sixteenths
    (100_000, 4, 512, 2),   # would be under 5,000 rows; of 100,000 rows they are not
])
def test_default_levels_is_the_fewest_whose_partition_kernel_fits_the_cache(
        n_rows: int, p: int, cache_mb: float, expected: int) -> None:
    assert default_levels(n_rows, p, cache_mb) == expected


@pytest.mark.parametrize(("n_rows", "cache_mb", "expected"), [
    (3_000, 512, 2),         # at least 2
    (32_561, 1024, 2),       # a9a: 16,281-row halves fit 1 GB in float32 (16,384 rows do)
    (32_561, 512, 3),        # ... not 512 MB (11,585 rows)
    (49_990, 1024, 4),       # ijcnn1: 12,498-row quarters
    (59_535, 1024, 4),       # cod-rna: 14,884-row quarters
    (1_000_000, 1024, 62),   # SUSY-sized: 62 partitions of <= 16,130 rows
])
def test_default_p_is_the_smallest_whose_level_one_kernel_fits_the_cache(
        n_rows: int, cache_mb: float, expected: int) -> None:
    p = default_p(n_rows, cache_mb)
    assert p == expected
    fit_rows = (cache_mb * (1 << 20) / 4) ** 0.5
    assert -(-n_rows // p) <= fit_rows
    assert p == 2 or -(-n_rows // (p - 1)) > fit_rows


def test_sodm_without_p_uses_the_default_p():
    # a 4 MB cache holds the float32 kernel of 1,024 rows: 3,000 rows need 3 partitions
    rng = np.random.default_rng(5)
    X = rng.random((3000, 3))
    y = np.where(X[:, 0] > X[:, 1], 1.0, -1.0)
    res = sodm_kernel(X, y, KERNEL, PARAMS, levels=1, cache_size=4.0, random_state=0)
    assert res.p == default_p(3000, 4.0) == 3
    assert [h["partitions"] for h in res.history] == [3]
    assert len(np.unique(res.partitions)) == 3


def _load(path: Path, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    with lzma.open(path, "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=n_features)
    X = X.toarray()
    lo, span = X.min(axis=0), np.ptp(X, axis=0)
    span[span == 0] = 1.0
    return (X - lo) / span, np.where(y == y.min(), -1.0, 1.0)


@pytest.fixture(scope="module")
def guide(datasets_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    return _load(datasets_dir / "svmguide1.xz", 4)


@pytest.fixture(scope="module")
def exact(guide) -> np.ndarray:
    X, y = guide
    return solve_kernel_dual(X, y, KERNEL, PARAMS, tol=1e-7, max_iter=5000,
                             random_state=0).alpha


def test_one_partition_equals_exact_solver(guide, monkeypatch) -> None:
    # without an attempt's fixed cost, so that this 800-row fit makes Newton attempts to count
    monkeypatch.setattr(newton_kernel, "DIRECT_FIXED", 0.0)
    X, y = guide[0][:800], guide[1][:800]
    res = sodm_kernel(X, y, KERNEL, PARAMS, levels=0, tol=1e-8, random_state=5)
    ref = solve_kernel_dual(X, y, KERNEL, PARAMS, tol=1e-8, random_state=local_seed(5, 0, 0))
    np.testing.assert_allclose(res.alpha, ref.alpha, atol=1e-6)
    assert [h["level"] for h in res.history] == [0]
    # the level record counts the partition's Newton work as the solver does
    assert res.history[0]["factorizations"] == len(ref.newton.factored) > 0
    assert res.history[0]["factor_work"] == ref.newton.factor_work
    other = solve_kernel_dual(X, y, KERNEL, PARAMS, tol=1e-8, random_state=123)
    np.testing.assert_allclose(res.alpha, other.alpha, atol=1e-6)


@pytest.mark.parametrize("warm_start", ["rescale", "literal"])
def test_levels_approach_exact_optimum(guide, exact, warm_start: str) -> None:
    X, y = guide
    M = len(y)
    res = sodm_kernel(X, y, KERNEL, PARAMS, p=2, levels=3, n_strata=20,
                      warm_start=warm_start, final_global_solve=True, tol=1e-7,
                      random_state=0, keep_levels=True)
    Q = kernel_matrix(KERNEL, X) * np.outer(y, y)
    d_star = dual_objective(Q, exact, PARAMS, M)
    sizes = {3: M / 8, 2: M / 4, 1: M / 2, 0: M}
    gaps, dists = [], []
    for level in (3, 2, 1, 0):
        # put every level's solution on the global problem's scale (m_l / M)
        a = res.level_alpha[level] * (sizes[level] / M)
        gaps.append(dual_objective(Q, a, PARAMS, M) - d_star)
        dists.append(np.linalg.norm(a - exact))
    assert all(g >= -1e-9 for g in gaps)
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3]
    assert dists[0] > dists[1] > dists[2] > dists[3]
    assert gaps[3] < 1e-8 and dists[3] < 1e-4
    np.testing.assert_allclose(res.alpha, exact, atol=1e-4)
    assert [h["level"] for h in res.history] == [3, 2, 1, 0]
    for h in res.history:
        assert h["kkt_violation"] <= 1e-7 and h["converged"]
        assert h["partitions"] == 2 ** h["level"]
        assert h["partition_size"] == -(-M // 2 ** h["level"])
    # the rescaled warm start starts closer to the merged optimum than the literal one
    if warm_start == "rescale":
        assert res.history[1]["warm_start_kkt"] < 0.5


def test_reproducible_and_parallel_equals_serial(guide) -> None:
    X, y = guide[0][:1200], guide[1][:1200]
    kw = dict(p=2, levels=2, n_strata=10, tol=1e-4, random_state=11)
    a = sodm_kernel(X, y, KERNEL, PARAMS, n_jobs=1, **kw)
    b = sodm_kernel(X, y, KERNEL, PARAMS, n_jobs=1, **kw)
    c = sodm_kernel(X, y, KERNEL, PARAMS, n_jobs=2, **kw)
    np.testing.assert_array_equal(a.alpha, b.alpha)
    np.testing.assert_array_equal(a.alpha, c.alpha)
    np.testing.assert_array_equal(a.partitions, c.partitions)
    d = sodm_kernel(X, y, KERNEL, PARAMS, n_jobs=1, **{**kw, "random_state": 12})
    assert not np.array_equal(a.partitions, d.partitions)


def test_partitions_are_stratified_and_balanced(guide) -> None:
    X, y = guide[0][:1000], guide[1][:1000]
    res = sodm_kernel(X, y, KERNEL, PARAMS, p=2, levels=3, n_strata=7, tol=1e-3,
                      random_state=3)
    sizes = np.bincount(res.partitions, minlength=8)
    assert sizes.max() - sizes.min() <= 1
    for s in np.unique(res.strata):
        per = np.bincount(res.partitions[res.strata == s], minlength=8)
        assert per.max() - per.min() <= 1
    assert len(res.landmarks) == 7 and res.strata[res.landmarks].tolist() == list(range(7))


def test_callbacks_validation_accuracy_and_stop(guide) -> None:
    X, y = guide[0][:1000], guide[1][:1000]
    Xv, yv = guide[0][1000:1400], guide[1][1000:1400]
    calls: list[tuple[float, str, dict]] = []
    res = sodm_kernel(X, y, KERNEL, PARAMS, levels=2, tol=1e-3, random_state=0,
                      X_val=Xv, y_val=yv, keep_levels=True,
                      progress=lambda f, m, r: calls.append((f, m, r)))
    assert [c[0] for c in calls] == pytest.approx([0.5, 1.0])
    assert [c[2]["level"] for c in calls] == [2, 1]
    assert all(0.6 < c[2]["val_accuracy"] <= 1.0 for c in calls)
    assert res.stopped is False and res.history == [c[2] for c in calls]

    seen: list[dict] = []
    stopped = sodm_kernel(X, y, KERNEL, PARAMS, levels=2, tol=1e-3, random_state=0,
                          progress=lambda f, m, r: seen.append(r),
                          should_stop=lambda: len(seen) >= 1)
    assert stopped.stopped is True and len(stopped.history) == 1
    np.testing.assert_array_equal(stopped.alpha, res.level_alpha[2])


def test_convergence_test_returns_early(guide) -> None:
    X, y = guide[0][:600], guide[1][:600]
    # with a loose tolerance the merged warm start already satisfies every merged problem
    res = sodm_kernel(X, y, KERNEL, PARAMS, levels=2, tol=5.0, random_state=0)
    assert res.converged_early and res.last_level == 1
    assert res.history[-1]["skipped_partitions"] == 2
    assert res.history[-1]["converged_early"] is True
    tight = sodm_kernel(X, y, KERNEL, PARAMS, levels=2, tol=1e-4, random_state=0)
    assert not tight.converged_early and tight.history[-1]["skipped_partitions"] == 0


def test_stop_reaches_worker_processes(guide) -> None:
    X, y = guide[0][:1200], guide[1][:1200]
    seen: list[dict] = []
    res = sodm_kernel(X, y, KERNEL, PARAMS, levels=2, n_jobs=2, tol=1e-4, random_state=0,
                      progress=lambda f, m, r: seen.append(r),
                      should_stop=lambda: len(seen) >= 1)
    assert res.stopped is True and [h["level"] for h in res.history] == [2]
    full = sodm_kernel(X, y, KERNEL, PARAMS, levels=2, n_jobs=2, tol=1e-4, random_state=0,
                       keep_levels=True)
    np.testing.assert_array_equal(res.alpha, full.level_alpha[2])


def _wait_for_stop(tag: int, *, should_stop) -> int:
    """Runs in a worker process: spin until the parent forwards the stop (or give up)."""
    import time

    for _ in range(6000):
        if should_stop():
            return tag
        time.sleep(0.01)
    return -1


def test_task_pool_forwards_stop_to_workers() -> None:
    polls = {"n": 0}

    def stop() -> bool:
        polls["n"] += 1
        return polls["n"] >= 3

    with TaskPool(2, stop) as pool:
        out = pool.map(_wait_for_stop, [((1,), {}), ((2,), {})])
        assert pool.stop_requested
    assert out == [1, 2] and polls["n"] >= 3


def _square(x: int, *, should_stop) -> int:
    return x * x


def _pool_size_in_daemon(queue) -> None:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pool = TaskPool(4)
        out = pool.map(_square, [((3,), {}), ((4,), {})])
    queue.put((pool.n_jobs, out, [str(w.message) for w in caught]))


def _blas_threads(x: int, *, should_stop=None) -> int:
    from threadpoolctl import threadpool_info

    return min(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_task_pool_workers_share_the_cores_for_blas() -> None:
    import os

    # two workers on this machine's cores: each BLAS pool gets cpus // 2 threads (>= 1), not
    # the full width that makes concurrent Cholesky solves oversubscribe the CPU
    with TaskPool(2) as pool:
        out = pool.map(_blas_threads, [((1,), {}), ((2,), {})])
    assert out == [max(1, (os.cpu_count() or 1) // 2)] * 2


def test_task_pool_runs_inline_in_daemonic_process() -> None:
    import multiprocessing as mp

    ctx = mp.get_context("forkserver")
    q = ctx.Queue()
    proc = ctx.Process(target=_pool_size_in_daemon, args=(q,), daemon=True)
    proc.start()
    n_jobs, out, messages = q.get(timeout=120)
    proc.join()
    assert n_jobs == 1 and out == [9, 16]
    assert any("daemonic" in m for m in messages)


def test_sparse_input_gives_the_dense_result(guide) -> None:
    import scipy.sparse as sp

    X, y = guide[0][:800], guide[1][:800]
    kw = dict(levels=2, n_strata=8, tol=1e-6, random_state=4)
    dense = sodm_kernel(X, y, KERNEL, PARAMS, **kw)
    sparse = sodm_kernel(sp.csr_matrix(X), y, KERNEL, PARAMS, **kw)
    np.testing.assert_array_equal(dense.partitions, sparse.partitions)
    np.testing.assert_allclose(dense.alpha, sparse.alpha, atol=1e-6)


def test_warm_start_violation_blocks(guide) -> None:
    from solver.exact.dcd_kernel import kernel_kkt_violation
    from solver.sodm.hierarchy import warm_start_violation

    X, y = guide[0][:3000], guide[1][:3000]
    a = np.abs(np.random.default_rng(0).normal(size=(3000, 2))) * 1e-3
    a[::2, 1] = 0.0
    a[1::2, 0] = 0.0
    exact = kernel_kkt_violation(X, y, KERNEL, PARAMS, a, m_scale=3000)
    full, u = warm_start_violation(X, y, KERNEL, PARAMS, a, 3000, np.inf, block_rows=500)
    assert full == pytest.approx(exact, rel=1e-10) and u is not None
    Q = kernel_matrix(KERNEL, X) * np.outer(y, y)
    np.testing.assert_allclose(u, Q @ (a[:, 0] - a[:, 1]), atol=1e-10)
    part, none = warm_start_violation(X, y, KERNEL, PARAMS, a, 3000, 1e-3, block_rows=500)
    assert none is None and 1e-3 < part <= exact


def test_solver_workers_import_no_scikit_learn() -> None:
    # the process pool's fork server preloads solver.sodm.hierarchy / solver.linear.dsvrg; without
    # scikit-learn (about 0.9 s of imports) every fit's pool starts that much sooner
    import subprocess
    import sys

    code = ("import sys, solver.sodm.hierarchy, solver.linear.dsvrg; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
    from solver import ODMClassifier, SODMClassifier  # the estimators still load on use

    assert ODMClassifier.__name__ == "ODMClassifier" and SODMClassifier().p is None
