"""Exact kernel ODM dual coordinate descent against independent solvers and closed forms."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.linalg import cho_factor
from scipy.optimize import minimize, nnls
from sklearn.exceptions import ConvergenceWarning

from solver.core import _numba_kernels as nk
from solver.core.formulation import ODMParams, diag_vectors, dual_objective, slacks_from_alpha
from solver.core.kernels import Kernel, kernel_matrix
from solver.exact import newton_kernel as nwt
from solver.exact.dcd_kernel import kernel_kkt_violation, solve_kernel_dual
from solver.exact.kernel_columns import ColumnStore

TOL = 1e-9


def _data(m=60, n=4, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.random((m, n))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    y = np.where(X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


def _box_qp(K, y, params, m_scale=None):
    """The dual as the box QP 1/2 a'Ha + b'a, a = [zeta; beta] >= 0: ``(H, b)``."""
    m = len(y)
    Q = (y[:, None] * y[None, :]) * K
    dz, db = params.diag_terms(m if m_scale is None else m_scale)
    H = np.block([[Q + dz * np.eye(m), -Q], [-Q, Q + db * np.eye(m)]])
    b = np.r_[(params.theta - 1) * np.ones(m), (params.theta + 1) * np.ones(m)]
    return H, b


def _lbfgsb(H, b, a0):
    """``min 1/2 a'Ha + b'a, a >= 0`` from ``a0`` by L-BFGS-B with tight tolerances."""
    return minimize(lambda a: (0.5 * a @ H @ a + b @ a, H @ a + b), a0, jac=True,
                    method="L-BFGS-B", bounds=[(0, None)] * a0.size,
                    options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 50_000, "maxcor": 30})


def _reference_dual(K, y, params, m_scale=None):
    """The box QP solved by L-BFGS-B: its objective and ``(m, 2)`` solution."""
    m = len(y)
    res = _lbfgsb(*_box_qp(K, y, params, m_scale), np.zeros(2 * m))
    return res.fun, np.c_[res.x[:m], res.x[m:]]


CASES = [
    (Kernel("linear"), ODMParams(lam=4.0, upsilon=0.3, theta=0.2)),
    (Kernel("rbf", gamma=2.0), ODMParams(lam=8.0, upsilon=0.5, theta=0.3)),
    (Kernel("rbf", gamma=0.5), ODMParams(lam=100.0, upsilon=1.0, theta=0.0)),
    (Kernel("poly", gamma=1.0, degree=2, coef0=1.0), ODMParams(lam=2.0, upsilon=0.8, theta=0.1)),
]


@pytest.mark.parametrize(("kernel", "params"), CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_generic_qp_solver_and_kkt_closed_forms(kernel, params, seed):
    X, y = _data(seed=seed)
    res = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=seed)
    assert res.converged and not res.stopped
    assert res.kkt_violation <= TOL
    K = kernel_matrix(kernel, X)
    ref_obj, ref_alpha = _reference_dual(K, y, params)
    assert res.objective == pytest.approx(ref_obj, rel=1e-6)
    assert res.objective <= ref_obj + 1e-9 * abs(ref_obj)
    np.testing.assert_allclose(res.alpha, ref_alpha, atol=1e-4)
    Q = (y[:, None] * y[None, :]) * K
    assert dual_objective(Q, res.alpha, params) == pytest.approx(res.objective, rel=1e-10)
    # KKT: slacks from the closed forms equal the margin shortfalls/excesses; zeta*beta = 0
    margins = y * (K @ (y * (res.alpha[:, 0] - res.alpha[:, 1])))
    xi, eps = slacks_from_alpha(res.alpha, params)
    np.testing.assert_allclose(xi, np.maximum(0, 1 - params.theta - margins), atol=1e-7)
    np.testing.assert_allclose(eps, np.maximum(0, margins - 1 - params.theta), atol=1e-7)
    assert np.all(res.alpha[:, 0] * res.alpha[:, 1] == 0)
    assert np.any(res.alpha[:, 0] > 0)
    assert kernel_kkt_violation(X, y, kernel, params, res.alpha) <= 10 * TOL


def test_linear_kernel_strong_duality():
    X, y = _data(m=80, seed=3)
    params = ODMParams(lam=6.0, upsilon=0.4, theta=0.2)
    res = solve_kernel_dual(X, y, Kernel("linear"), params, tol=TOL, random_state=0)
    w = X.T @ (y * (res.alpha[:, 0] - res.alpha[:, 1]))
    gam = y * (X @ w)
    xi = np.maximum(0, 1 - params.theta - gam)
    eps = np.maximum(0, gam - 1 - params.theta)
    primal = 0.5 * w @ w + params.lam / (2 * len(y)) * np.sum(
        xi**2 + params.upsilon * eps**2) / (1 - params.theta) ** 2
    assert primal == pytest.approx(-res.objective, rel=1e-8)


def test_ridge_regression_when_theta_zero_and_upsilon_one():
    X, y = _data(m=50, seed=4)
    lam = 20.0
    kernel = Kernel("rbf", gamma=1.5)
    res = solve_kernel_dual(X, y, kernel, ODMParams(lam=lam, upsilon=1.0, theta=0.0),
                            tol=1e-10, random_state=0)
    K = kernel_matrix(kernel, X)
    # 1/2||w||^2 + lam/(2M) sum (f(x_i) - y_i)^2  =>  nu = (K + M/lam I)^-1 y
    nu = np.linalg.solve(K + len(y) / lam * np.eye(len(y)), y)
    np.testing.assert_allclose(y * (res.alpha[:, 0] - res.alpha[:, 1]), nu, atol=1e-7)


def test_m_scale_is_the_m_of_the_mc_term():
    X, y = _data(m=40, seed=5)
    k = Kernel("rbf", gamma=1.0)
    a = solve_kernel_dual(X, y, k, ODMParams(lam=6.0), m_scale=80, tol=TOL, random_state=0)
    b = solve_kernel_dual(X, y, k, ODMParams(lam=3.0), tol=TOL, random_state=0)
    np.testing.assert_allclose(a.alpha, b.alpha, atol=1e-8)


@pytest.fixture(scope="module")
def rbf_problem():
    X, y = _data(m=150, n=5, seed=7)
    kernel = Kernel("rbf", gamma=3.0)
    params = ODMParams(lam=50.0, upsilon=0.5, theta=0.2)
    ref = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=0, shrinking=False)
    assert ref.converged
    return X, y, kernel, params, ref


def test_warm_start_reaches_the_same_optimum(rbf_problem):
    X, y, kernel, params, ref = rbf_problem
    rng = np.random.default_rng(0)
    for alpha0 in (ref.alpha * rng.uniform(0.5, 2.0, size=ref.alpha.shape),
                   rng.random(ref.alpha.shape)):
        res = solve_kernel_dual(X, y, kernel, params, alpha0=alpha0, tol=TOL, random_state=1)
        assert res.converged
        assert res.objective == pytest.approx(ref.objective, rel=1e-10)
        np.testing.assert_allclose(res.alpha, ref.alpha, atol=1e-7)
    # starting at the optimum needs a single checking epoch
    again = solve_kernel_dual(X, y, kernel, params, alpha0=ref.alpha, tol=1e-6)
    assert again.n_iter == 1 and again.converged
    with pytest.raises(ValueError, match="alpha0"):
        solve_kernel_dual(X, y, kernel, params, alpha0=np.zeros((3, 2)))


def test_shrinking_on_and_off_agree(rbf_problem):
    X, y, kernel, params, ref = rbf_problem
    res = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=3, shrinking=True)
    assert res.converged
    np.testing.assert_allclose(res.alpha, ref.alpha, atol=1e-7)
    assert res.objective == pytest.approx(ref.objective, rel=1e-10)


def test_column_cache_mode_equals_full_matrix_mode(rbf_problem):
    X, y, kernel, params, ref = rbf_problem
    tiny = 150 * 8 * 10 / 2**20  # room for 10 float64 columns: forces the LRU cache path
    res = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=0, shrinking=False,
                            cache_size=tiny, kernel_dtype=np.float64)
    assert res.converged
    np.testing.assert_allclose(res.alpha, ref.alpha, atol=1e-9)
    # default float32 storage in cache mode: same optimum up to float32 kernel rounding
    res32 = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=0, cache_size=tiny)
    assert res32.objective == pytest.approx(ref.objective, rel=1e-6)
    assert kernel_kkt_violation(X, y, kernel, params, res32.alpha) <= 1e-5


@pytest.mark.parametrize("warm", [False, True])
def test_kernel_memory_stays_within_cache_size(warm):
    """The float32 full-matrix mode (float64 would not fit the budget): no step, the
    warm-started initial ``f`` included, may make a float64 copy of the matrix (this was
    3x the budget per worker on a9a).  numpy reports its buffers to tracemalloc."""
    m = 6000
    X, y = _data(m=m, n=5, seed=4)
    kernel = Kernel("rbf", gamma=1.0)
    params = ODMParams(lam=100.0, upsilon=0.5, theta=0.3)
    budget_mb = m * m * 6 / 2**20  # float32 fits (4 B/entry), float64 does not
    alpha0 = None
    if warm:  # a 3-epoch start, short of the tolerance on purpose
        with pytest.warns(ConvergenceWarning, match="did not converge in 3 epochs"):
            alpha0 = solve_kernel_dual(X, y, kernel, params, max_iter=3).alpha
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            solve_kernel_dual(X, y, kernel, params, alpha0=alpha0, max_iter=5,
                              cache_size=budget_mb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the matrix (2/3 of the budget) plus kernel_matrix's fixed 32 MB blocks and O(m) vectors
    assert peak <= (budget_mb + 64) * 2**20, f"peak {peak / 2**20:.0f} MB, budget {budget_mb:.0f}"


@pytest.mark.parametrize(("m", "budget_mb", "full"), [(1500, 12.0, True), (3000, 8.0, False)])
def test_face_factor_uses_what_the_kernel_leaves_of_the_memory_ceiling(m, budget_mb, full):
    """A solve may hold 1.25x its kernel budget: the direct step's float32 factor gets what
    the kernel values leave of that (a full float32 matrix of 1,500 rows takes 8.6 of 12 MB,
    so faces up to 1,657 rows instead of a quarter's 886), and at least a quarter of the
    budget (column-cache mode fills the budget with slots; its face entries cost 12 bytes)."""
    X, y = _data(m=m, n=4, seed=2)
    store = ColumnStore(X, Kernel("rbf", gamma=1.0), budget_mb * (1 << 20))
    assert store.full is full
    held = store.cache.nbytes
    dz, db = diag_vectors(ODMParams(lam=1e4, theta=0.5), m, m)
    sched = nwt.NewtonSchedule.for_store(store, np.ones(m), y, dz, db, 0.5)
    spare = 1.25 * budget_mb * (1 << 20) - held
    if full:
        assert held == m * m * 4 and sched.direct_max == int(np.sqrt(spare / 4))
        assert sched.direct_max > max(nwt.DIRECT_MIN_FACE, int(np.sqrt(budget_mb * 2**20 / 16)))
    else:
        assert sched.direct_max == max(nwt.DIRECT_MIN_FACE,
                                       int(np.sqrt(0.25 * budget_mb * (1 << 20) / 12)))
    # the factor and the kernel values together stay within the ceiling
    assert held + sched.direct_max ** 2 * store.face_bytes <= max(
        1.25 * budget_mb * (1 << 20), held + nwt.DIRECT_MIN_FACE ** 2 * store.face_bytes)


def test_csr_input_equals_dense():
    X, y = _data(m=90, n=6, seed=8, sparse=True)
    kernel = Kernel("rbf", gamma=2.0)
    params = ODMParams(lam=10.0, upsilon=0.5, theta=0.2)
    dense = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=0)
    for cs in (512, 90 * 8 * 6 / 2**20):
        res = solve_kernel_dual(sp.csr_matrix(X), y, kernel, params, tol=TOL, random_state=0,
                                cache_size=cs, kernel_dtype=np.float64)
        np.testing.assert_allclose(res.alpha, dense.alpha, atol=1e-9)


def test_should_stop_returns_current_iterate():
    X, y = _data(m=100, seed=9)
    kernel = Kernel("rbf", gamma=5.0)
    params = ODMParams(lam=1e4, upsilon=0.5, theta=0.1)
    calls = []

    def stop():
        calls.append(1)
        return True

    res = solve_kernel_dual(X, y, kernel, params, tol=1e-12, should_stop=stop)
    assert res.stopped and not res.converged
    assert res.n_iter == 1 and len(calls) == 1
    assert np.any(res.alpha > 0)
    assert res.kkt_violation == pytest.approx(
        kernel_kkt_violation(X, y, kernel, params, res.alpha), rel=1e-6)


def test_max_iter_warns_convergence_warning():
    X, y = _data(m=100, seed=10)
    with pytest.warns(ConvergenceWarning):
        res = solve_kernel_dual(X, y, Kernel("rbf", gamma=5.0),
                                ODMParams(lam=1e4, upsilon=0.5, theta=0.1), tol=1e-12,
                                max_iter=2)
    assert not res.converged and res.n_iter == 2


@pytest.mark.parametrize(
    ("params", "kwargs", "name"),
    [
        (ODMParams(lam=0.0), {}, "lam"),
        (ODMParams(upsilon=-1.0), {}, "upsilon"),
        (ODMParams(theta=1.0), {}, "theta"),
        (ODMParams(), {"tol": 0.0}, "tol"),
        (ODMParams(), {"max_iter": 0}, "max_iter"),
        (ODMParams(), {"cache_size": 0}, "cache_size"),
        (ODMParams(), {"m_scale": -3}, "m_scale"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(params, kwargs, name):
    X, y = _data(m=10)
    with pytest.raises(ValueError, match=name):
        solve_kernel_dual(X, y, Kernel("rbf"), params, **kwargs)


def test_labels_must_be_plus_minus_one():
    X, y = _data(m=10)
    with pytest.raises(ValueError, match="y"):
        solve_kernel_dual(X, (y + 1) / 2, Kernel("rbf"), ODMParams())


def test_same_seed_same_result_and_no_warning_when_converged():
    X, y = _data(m=70, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        a = solve_kernel_dual(X, y, Kernel("rbf"), ODMParams(), random_state=5)
        b = solve_kernel_dual(X, y, Kernel("rbf"), ODMParams(), random_state=5)
    np.testing.assert_array_equal(a.alpha, b.alpha)
    assert a.converged and a.kkt_violation <= 1e-3


def test_active_set_newton_solves_ill_conditioned_problems_exactly():
    # a wide poly kernel with large lam: condition number ~1e5, coordinate descent alone needs
    # ~10^4 epochs here; the active-set Newton step must reach the same optimum much sooner
    X, y = _data(m=120, n=3, seed=12)
    X = np.c_[X, np.ones(len(y))]
    kernel = Kernel("poly", gamma=8.0, degree=2, coef0=1.0)
    params = ODMParams(lam=1000.0, upsilon=0.5, theta=0.2)
    fast = solve_kernel_dual(X, y, kernel, params, tol=1e-6, random_state=0, max_iter=500)
    assert fast.converged and fast.n_iter < 500
    with pytest.warns(ConvergenceWarning):
        slow = solve_kernel_dual(X, y, kernel, params, tol=1e-6, random_state=0,
                                 newton=False, max_iter=max(fast.n_iter, 300))
    assert not slow.converged and slow.objective > fast.objective
    # exact reference: the box QP as non-negative least squares (H = L L', Lawson-Hanson)
    m = len(y)
    H, b = _box_qp(kernel_matrix(kernel, X), y, params)
    L = np.linalg.cholesky(H)
    a, _ = nnls(L.T, -np.linalg.solve(L, b), maxiter=50 * m)
    ref_obj = 0.5 * a @ H @ a + b @ a
    assert fast.objective == pytest.approx(ref_obj, rel=1e-7)
    np.testing.assert_allclose(fast.alpha, np.c_[a[:m], a[m:]], rtol=1e-4, atol=1e-4)
    assert np.all(fast.alpha[:, 0] * fast.alpha[:, 1] == 0)
    assert kernel_kkt_violation(X, y, kernel, params, fast.alpha) <= 1e-5


@pytest.mark.parametrize("cache_mb", [64.0, 0.05])
def test_direct_newton_step_reaches_the_optimum_in_both_kernel_modes(cache_mb):
    # a wide band (theta = 0.8) leaves few instances outside it: the face is small, so the
    # active-set step uses exact Cholesky face solves from epoch 5, with the whole matrix
    # (64 MB) and from X in column-cache mode (0.05 MB holds 32 of the 200 columns); both
    # must stop at the QP optimum long before coordinate descent alone does
    X, y = _data(m=200, n=3, seed=4)
    kernel = Kernel("rbf", gamma=4.0)
    params = ODMParams(lam=1e5, upsilon=0.5, theta=0.8)
    fast = solve_kernel_dual(X, y, kernel, params, tol=1e-8, random_state=0,
                             cache_size=cache_mb, max_iter=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        slow = solve_kernel_dual(X, y, kernel, params, tol=1e-8, random_state=0,
                                 cache_size=cache_mb, max_iter=2000, newton=False)
    assert fast.converged and fast.n_iter < 20 < slow.n_iter
    # the work is counted: faces of at most the 200 rows, their Cholesky work sum(s^3)/3
    work = fast.newton
    assert work.attempts >= 1 and work.factored and max(work.factored) <= 200
    assert work.factor_work == pytest.approx(sum(s ** 3 for s in work.factored) / 3)
    assert work.record()["faces_factored"] == list(work.factored)
    assert slow.newton == nwt.NewtonWork()  # no Newton step, nothing counted
    assert fast.kkt_violation <= 1e-8
    assert kernel_kkt_violation(X, y, kernel, params, fast.alpha) <= 1e-7
    ref_obj, _ = _reference_dual(kernel_matrix(kernel, X), y, params)
    assert fast.objective <= ref_obj + 1e-9 * abs(ref_obj)
    assert np.all(fast.alpha[:, 0] * fast.alpha[:, 1] == 0)


def test_a_face_the_base_factor_solves_inaccurately_is_factored_anew():
    # lam = 1e6 and a wide kernel: faces of condition ~1e6 whose bordered solves from the
    # base factor stall the refinement above the target; the states then cycled on rounding
    # noise and every Newton attempt failed (1,000 epochs without converging). A face the
    # base solves inaccurately is factored anew, and the first attempt converges.
    X, y = _data(m=300, n=8, seed=1)
    kernel = Kernel("rbf", gamma=0.2)
    params = ODMParams(lam=1e6, theta=0.5)
    res = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=1000)
    assert res.converged and res.n_iter < 20
    assert kernel_kkt_violation(X, y, kernel, params, res.alpha) <= 1e-3


def test_a_face_too_large_to_factor_that_stops_shrinking_gets_cg():
    # binary features (64 distinct rows out of 1,200), a narrow kernel and lam = 1e6: every
    # row stays on the face (1,200 rows, past the 1,000 a direct step factors with a 7 MB
    # kernel budget) and coordinate descent crawls. Once the face stops shrinking, CG runs
    # on it even within twice the direct limit.
    rng = np.random.default_rng(0)
    X = (rng.random((1200, 6)) < 0.5).astype(float)
    y = np.where(X[:, 0] - X[:, 1] + 0.8 * rng.normal(size=1200) > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=5.0)
    params = ODMParams(lam=1e6, theta=0.5)
    res = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=1000,
                            cache_size=7.0)
    assert res.converged and res.n_iter < 100
    assert kernel_kkt_violation(X, y, kernel, params, res.alpha) <= 1e-3


def _schedule_with_face(m: int, face: int, lam: float):
    """The Newton schedule of an m-row RBF problem (7 MB budget: direct limit 1,000 rows)
    and decision values ``f`` that put its first ``face`` rows on the predicted face."""
    X, y = _data(m=m, n=4, seed=2)
    store = ColumnStore(X, Kernel("rbf", gamma=5.0), 7.0 * (1 << 20))
    params = ODMParams(lam=lam, theta=0.5)
    dz, db = diag_vectors(params, m, m)
    sched = nwt.NewtonSchedule.for_store(store, np.ones(m), y, dz, db, params.theta)
    f = y.copy()  # margins 1: inside the band
    f[:face] = 0.0  # margins 0: outside it, on the predicted face
    return sched, f


@pytest.mark.parametrize(("face", "attempts"), [(1100, 0), (1150, 1)])
def test_cg_on_a_stalled_face_within_twice_the_limit_only_when_nearly_every_row_is_on_it(
        face, attempts):
    # 1,210 rows, direct limit 1,000 (7 MB budget), the face stalled at `face` rows, slow
    # progress: with most rows on the face shrinking makes epochs cheaper than CG's mat-vecs
    # (an ijcnn1.t partition at 73 %: CG attempts took 78 s where coordinate descent took
    # 18 s), so CG waits; with 95 % or more of them (1,150) it runs
    m = 1210
    sched, f = _schedule_with_face(m, face, lam=1e6)
    assert sched.store.full and sched.direct_max == 1000 < face < nwt.CG_FACE_FACTOR * 1000
    sched.face_history = [face] * 20
    kkts = list(np.linspace(1.0, 0.95, 50))
    sched.after_epoch(50, kkts, np.zeros((m, 2)), f, 1e-3)
    assert sched.n_attempts == attempts


@pytest.mark.parametrize(("kkts", "attempts"), [
    ([0.5 ** k for k in range(10)], 0),  # halves every epoch: about one epoch left
    (list(np.linspace(1.0, 0.95, 10)), 1),  # crawls: over a thousand epochs left
])
def test_a_direct_step_waits_while_coordinate_descent_is_about_to_finish(kkts, attempts):
    # a face of 900 of 1,210 rows, within what a direct step factors: an attempt costs about
    # 0.03 * 900^2 / 1,210 = 20 epochs plus a fixed 1.5e8 / (1,210 * 900) = 138, so it is
    # made only when coordinate descent's extrapolated epochs left exceed twice that (an
    # ijcnn1.t partition converged in 30 epochs, 1.3 s, where the attempt at epoch 5 took
    # 4.0 s)
    m, face = 1210, 900
    sched, f = _schedule_with_face(m, face, lam=1e4)
    assert face <= sched.direct_settled
    left = nwt.epochs_left(kkts, 1e-3)
    assert (left < nwt.attempt_epochs(face, face, m)) == (attempts == 0)
    sched.after_epoch(len(kkts), kkts, np.zeros((m, 2)), f, 1e-3)
    assert sched.n_attempts == attempts


@pytest.mark.parametrize(("duals", "attempts"), [(0.001, 1), (10.0, 0)])
def test_a_direct_step_pays_by_the_face_it_would_factor_first(duals, attempts, monkeypatch):
    # 400 rows outside the band and 500 inside it with positive duals: a face of 900 as the
    # sign rule counts it. Duals of 0.001 are ones ten projected steps drop, so the attempt
    # would factor 400 rows first: worth it with ~20 epochs left (0.06 * 400^2 / 1,210 = 8),
    # where 900 rows would not be (40); duals of 10 stay (ten steps of (0.5 + 0.03 * 10) /
    # 1.03 each leave them positive), and the attempt waits. (The fixed cost, the same for
    # both, is left out: at this size it would outweigh either.)
    monkeypatch.setattr(nwt, "DIRECT_FIXED", 0.0)
    m = 1210
    sched, f = _schedule_with_face(m, 400, lam=1e4)
    alpha = np.zeros((m, 2))
    alpha[400:900, 0] = duals
    kdiag = np.ones(m)
    assert nwt.predicted_face(f, sched.y, alpha, sched.theta) == 900 <= sched.direct_settled
    first = nwt.first_face(f, sched.y, alpha, kdiag, sched.dz, sched.db, sched.theta)
    assert first == (400 if duals < 0.01 else 900)
    kkts = list(np.geomspace(1.0, 0.1, 12))
    left = nwt.epochs_left(kkts, 1e-3)
    assert nwt.DIRECT_WORTH * 400 ** 2 / m < left < nwt.DIRECT_WORTH * 900 ** 2 / m
    sched.after_epoch(len(kkts), kkts, alpha, f, 1e-3)
    assert sched.n_attempts == attempts


@pytest.mark.parametrize(("fixed", "max_iter", "attempts"), [
    (None, None, 0),
    (0.0, None, 1),
    (None, 60, 1),  # 50 epochs left to the solve: coordinate descent would not finish
])
def test_a_direct_step_on_a_small_fit_pays_its_fixed_cost_too(fixed, max_iter, attempts,
                                                              monkeypatch):
    # a face of 900 of 1,210 rows and about 100 epochs left: the factorization alone (40
    # epochs, twice counted) would be worth it, but an attempt's state updates cost about
    # as much again whatever the face (a fold of svmguide1, 3,089 rows: an attempt took
    # 0.11 s where an epoch takes 0.4 ms), and at this size that decides it
    m, face = 1210, 900
    kkts = list(np.geomspace(1.0, 0.5, 10))
    left = nwt.epochs_left(kkts, 1e-3)
    assert nwt.DIRECT_WORTH * face * face / m < left < nwt.attempt_epochs(face, face, m)
    if fixed is not None:
        monkeypatch.setattr(nwt, "DIRECT_FIXED", fixed)
    sched, f = _schedule_with_face(m, face, lam=1e4)
    if max_iter is not None:
        sched.max_iter = max_iter
    sched.after_epoch(len(kkts), kkts, np.zeros((m, 2)), f, 1e-3)
    assert sched.n_attempts == attempts


def _face_systems(m: int, n: int, seed: int, gamma: float, cache_mb: float):
    """Data, an RBF kernel, its column store (whole matrix or column cache) and faces."""
    X, _ = _data(m=m, n=n, seed=seed)
    kernel = Kernel("rbf", gamma=gamma)
    store = ColumnStore(X, kernel, cache_mb * (1 << 20))
    return X, kernel, store, nwt.FaceSystems(store)


@pytest.mark.parametrize("cache_mb", [64.0, 0.05])
def test_block_is_the_kernel_of_the_rows_in_their_order(cache_mb):
    # the face matrix K[S][:, S] for rows in any order, read from the whole matrix (a
    # compiled gather) or computed from X in column-cache mode, in the dtype asked for
    X, kernel, store, _ = _face_systems(300, 3, 7, 1.0, cache_mb)
    S = np.random.default_rng(1).permutation(300)[:120].astype(np.int64)
    for dtype in (np.float32, np.float64):
        B = store.block(S, dtype)
        assert B.dtype == dtype and B.shape == (120, 120)
        np.testing.assert_allclose(B, kernel_matrix(kernel, X)[np.ix_(S, S)], rtol=1e-6,
                                   atol=1e-7)


@pytest.mark.parametrize("cache_mb", [64.0, 0.05])
def test_face_solve_refines_a_float32_factor_to_float64_accuracy(cache_mb):
    # an ill-conditioned face system (RBF Gram + 1e-4 I: condition ~1e6): the float32
    # Cholesky alone is off by ~1e-2, the refined solution meets the target residual, from
    # the whole matrix and in column-cache mode alike
    X, kernel, store, faces = _face_systems(300, 3, 7, 1.0, cache_mb)
    assert store.full == (cache_mb == 64.0)
    S = np.arange(0, 300, 2, dtype=np.int64)
    D = np.full(S.size, 1e-4)
    t = np.random.default_rng(0).normal(size=S.size)
    x = faces.solve(S, D, t, 1e-9)
    A = kernel_matrix(kernel, X[S]) + np.diag(D)
    assert np.abs(A @ x - t).max() <= 1e-9
    np.testing.assert_allclose(x, np.linalg.solve(A, t), rtol=1e-6, atol=1e-6 * np.abs(x).max())


@pytest.mark.parametrize("cache_mb", [64.0, 0.05])
def test_a_narrow_kernel_factors_without_subnormals(cache_mb):
    # a narrow RBF kernel: most entries of the face matrix are tiny, and the fill-in of a
    # plain float32 Cholesky underflows to subnormals (slow on many CPUs); the face's factor
    # (small entries dropped, matrix scaled by a power of two) has none, and the refined
    # solve, from a new factor or from the base, is as accurate as ever
    X, kernel, store, faces = _face_systems(400, 8, 3, 60.0, cache_mb)
    S = np.arange(0, 400, 2, dtype=np.int64)
    D = np.full(S.size, 1e-3)
    A = kernel_matrix(kernel, X[S]) + np.diag(D)
    tiny = np.finfo(np.float32).tiny

    def subnormals(L: np.ndarray) -> int:
        L = np.tril(L)
        return int(np.sum((L != 0) & (np.abs(L) < tiny)))

    assert subnormals(cho_factor(A.astype(np.float32), lower=True)[0]) > 0
    t = np.random.default_rng(1).normal(size=S.size)
    x = faces.solve(S, D, t, 1e-10)
    assert np.abs(A @ x - t).max() <= 1e-10
    if store.full:
        assert subnormals(faces.fac[0]) == 0
        S2 = np.concatenate((S[5:], [1, 3]))  # from the base factor: 5 rows out, 2 in
        D2 = np.full(S2.size, 1e-3)
        x2 = faces.solve(S2, D2, t[: S2.size], 1e-10)
        A2 = kernel_matrix(kernel, X[S2]) + np.diag(D2)
        assert faces.n_updated == 1 and np.abs(A2 @ x2 - t[: S2.size]).max() <= 1e-10


def _solved_exactly(faces, kernel, X, face, diag, t) -> None:
    """``faces.solve`` meets the 1e-10 residual and agrees with a float64 dense solve."""
    x = faces.solve(face, diag, t, 1e-10)
    A = kernel_matrix(kernel, X[face]) + np.diag(diag)
    assert np.abs(A @ x - t).max() <= 1e-10
    np.testing.assert_allclose(x, np.linalg.solve(A, t), rtol=1e-7,
                               atol=1e-7 * np.abs(x).max())


@pytest.mark.parametrize("cache_mb", [64.0, 0.05])
def test_a_nearby_face_is_solved_from_the_last_factor(cache_mb):
    # after a face is factored, a face that differs by a few rows (removed, added, moved to
    # the other side, i.e. a new diagonal entry) is solved from that factor in full-matrix
    # mode, refactored in column-cache mode, to the same accuracy; a face with nothing in
    # common gets a factor of its own
    X, kernel, store, faces = _face_systems(300, 3, 7, 1.0, cache_mb)
    rng = np.random.default_rng(0)
    S = np.arange(0, 300, 2, dtype=np.int64)
    S2 = np.concatenate((S[3:], [1, 3]))  # 3 rows out, 2 in
    D2 = np.full(S2.size, 1e-2)
    D2[:2] = 3e-2  # 2 rows switch side
    far = np.arange(1, 300, 2, dtype=np.int64)
    for face, diag in ((S, np.full(S.size, 1e-2)), (S2, D2), (far, np.full(far.size, 1e-2))):
        _solved_exactly(faces, kernel, X, face, diag, rng.normal(size=face.size))
        if face is S2:
            assert (faces.n_factored, faces.n_updated) == ((1, 1) if store.full else (2, 0))
    assert faces.n_factored == (2 if store.full else 3)


def test_successive_faces_solve_each_added_row_from_the_base_once():
    # faces from one base that add the same rows and remove different ones: each is solved
    # from the base to full accuracy, and every added row's bordering column A_B^-1 K_Bn is
    # solved once and kept for the next face (it holds no diagonal term, so it stays valid
    # when the row moves to the other side, as row 5 does in the last face)
    X, kernel, store, faces = _face_systems(300, 3, 7, 1.0, 64.0)
    S = np.arange(0, 300, 2, dtype=np.int64)
    rng = np.random.default_rng(2)
    faces.solve(S, np.full(S.size, 1e-2), rng.normal(size=S.size), 1e-10)
    plan = ((S[3:], [1, 3]), (S[5:], [1, 3, 5]), (np.concatenate((S[:2], S[6:])), [1, 3, 5]))
    for i, (kept, added) in enumerate(plan, start=1):
        face = np.concatenate((kept, added)).astype(np.int64)
        D = np.full(face.size, 1e-2)
        D[-1] = 3e-2 if i == 3 else 1e-2
        _solved_exactly(faces, kernel, X, face, D, rng.normal(size=face.size))
        assert (faces.n_factored, faces.n_updated) == (1, i)
        assert len(faces.gcols) == len(added)  # rows 1, 3, 5, each solved once


def test_a_face_whose_update_costs_more_than_a_factor_is_factored_anew():
    # 30 of 150 rows removed: within UPDATE_SHARE, but their 30 triangular solves on the
    # 150-row base (2 * 30 * 150^2 = 1.35e6) cost more than factoring the 120-row face
    # (120^3 / 3 = 5.8e5), so it gets its own factor; 3 more removed from that new base
    # (2 * 3 * 120^2 = 8.6e4 against 117^3 / 3 = 5.3e5) are solved from it
    X, kernel, store, faces = _face_systems(300, 3, 7, 1.0, 64.0)
    S = np.arange(0, 300, 2, dtype=np.int64)
    rng = np.random.default_rng(1)
    for face, counts in ((S, (1, 0)), (S[30:], (2, 0)), (S[33:], (2, 1))):
        D = np.full(face.size, 1e-2)
        t = rng.normal(size=face.size)
        x = faces.solve(face, D, t, 1e-10)
        A = kernel_matrix(kernel, X[face]) + np.diag(D)
        assert np.abs(A @ x - t).max() <= 1e-10
        assert (faces.n_factored, faces.n_updated) == counts


def _after_30_epochs():
    """The ill-conditioned poly problem above after 30 epochs of coordinate descent:
    ``X, y, kernel, params``, the solve and the kernel matrix."""
    X, y = _data(m=120, n=3, seed=12)
    X = np.c_[X, np.ones(len(y))]
    kernel = Kernel("poly", gamma=8.0, degree=2, coef0=1.0)
    params = ODMParams(lam=1000.0, upsilon=0.5, theta=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        start = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=30,
                                  newton=False)
    return X, y, kernel, params, start, kernel_matrix(kernel, X)


def test_failed_newton_attempt_keeps_its_progress_only_when_it_lowers_the_objective():
    # the ill-conditioned problem above, 30 epochs of coordinate descent, then one Newton
    # attempt whose budget is too small to converge: it may move the iterate, but only to a
    # feasible point with exact f = K nu and a lower dual objective
    X, y, kernel, params, start, K = _after_30_epochs()
    m = len(y)
    dz, db = diag_vectors(params, m, m)
    outcomes = set()
    for budget in (2, 5, 20, 60):
        alpha = start.alpha.copy()
        f = K @ (y * (alpha[:, 0] - alpha[:, 1]))
        store = ColumnStore(X, kernel, 64 * (1 << 20))
        ok, moved = nwt.active_set_newton(store, np.diag(K).copy(), y, alpha, f, dz, db,
                                          params.theta, 1e-6, budget=budget)
        outcomes.add((ok, moved))
        if not moved:
            np.testing.assert_array_equal(alpha, start.alpha)
            continue
        assert (alpha >= 0).all() and not np.any((alpha[:, 0] > 0) & (alpha[:, 1] > 0))
        np.testing.assert_allclose(f, K @ (y * (alpha[:, 0] - alpha[:, 1])), atol=1e-9)
        assert (dual_objective(y * f, alpha, params, m)
                < dual_objective(y * K @ (y * (start.alpha[:, 0] - start.alpha[:, 1])),
                                 start.alpha, params, m))
    assert (False, True) in outcomes  # some budget-limited attempt kept its progress


def test_a_block_step_minimises_over_its_rows_and_holds_the_others():
    # the ill-conditioned problem above after 30 epochs of coordinate descent; a block step
    # on the 60 of its 120 rows deepest in the face: the other 60 keep their duals, and the
    # 60 reach the minimum of the dual over them with the others fixed (L-BFGS-B on that
    # box QP agrees), a lower objective than before
    X, y, kernel, params, start, K = _after_30_epochs()
    m = len(y)
    kdiag = np.diag(K).copy()
    dz, db = diag_vectors(params, m, m)
    alpha = start.alpha.copy()
    f = K @ (y * (alpha[:, 0] - alpha[:, 1]))
    assert nwt.predicted_face(f, y, alpha, params.theta) > 60
    free = nwt.block_rows(f, y, alpha, kdiag, params.theta, 60)
    assert free.sum() == 60
    store = ColumnStore(X, kernel, 64 * (1 << 20))
    ok, moved = nwt.active_set_newton(store, kdiag, y, alpha, f, dz, db, params.theta, 1e-6,
                                      budget=10_000, direct_max=m,
                                      faces=nwt.FaceSystems(store), free=free)
    assert moved and not ok  # a block step never claims the whole problem converged
    np.testing.assert_array_equal(alpha[~free], start.alpha[~free])
    np.testing.assert_allclose(f, K @ (y * (alpha[:, 0] - alpha[:, 1])), atol=1e-9)
    viol = nk.pair_violations(f, y, alpha, dz, db, params.theta, np.empty(m))
    assert viol[free].max() <= 1e-6 < viol[~free].max()
    # the reference: the box QP over the free rows' (zeta, beta), the others fixed
    H, b = _box_qp(K, y, params)
    a0 = np.r_[start.alpha[:, 0], start.alpha[:, 1]]
    idx = np.r_[np.flatnonzero(free), m + np.flatnonzero(free)]
    held = np.setdiff1d(np.arange(2 * m), idx)
    ref = a0.copy()
    ref[idx] = _lbfgsb(H[np.ix_(idx, idx)], b[idx] + H[np.ix_(idx, held)] @ a0[held],
                       a0[idx]).x
    got = np.r_[alpha[:, 0], alpha[:, 1]]

    def obj(a):
        return 0.5 * a @ H @ a + b @ a

    assert obj(got) == pytest.approx(obj(ref), rel=1e-7)
    assert obj(got) < obj(a0)


def test_the_first_face_keeps_only_members_projected_steps_would_keep(monkeypatch):
    # theta 0.2 (band [0.8, 1.2]), K_ii 1, both pair diagonals 0.1. After coordinate
    # descent a member's gradient is not zero: START_STEPS projected coordinate steps
    # (10 x gradient / 1.1) decide whether its dual stays positive. Rows: a Z member below
    # the band, a small Z member inside it, a B member above the band, a small B member
    # inside it, a non-member below the band (joins Z), one inside it (stays out), and a
    # Z member with a small positive gradient but a dual too large for ten steps to zero;
    # the sign rule's face (6 of 7 rows) holds more than START_SHARE of the rows
    m = 7
    start = (np.ones(m), np.full(m, 0.1), np.full(m, 0.1))  # kdiag, dz, db
    zs = np.array([1, 1, 0, 0, 0, 0, 1], dtype=bool)
    bs = np.array([0, 0, 1, 1, 0, 0, 0], dtype=bool)
    ysn = np.array([0.5, 0.01, -0.3, -0.01, 0.0, 0.0, 0.2])  # zeta on Z, -beta on B
    u = np.array([0.5, 0.85, 1.5, 1.15, 0.5, 1.0, 0.79])
    new_z, new_b = nwt.next_states(zs, bs, ysn, u, 0.2, start)
    assert new_z.tolist() == [True, False, False, False, True, False, True]
    assert new_b.tolist() == [False, False, True, False, False, False, False]
    # after a face solve (members' gradients zero) members keep the sign of their dual
    new_z, new_b = nwt.next_states(zs, bs, ysn, u, 0.2)
    assert new_z.tolist() == [True, True, False, False, True, False, True]
    assert new_b.tolist() == [False, False, True, True, False, False, False]
    # the same seven rows among 30 more inside the band: the sign rule's face (6 rows) holds
    # at most START_SHARE (a fifth) of the 37, and is kept whole
    pad = np.zeros(30, dtype=bool)
    wide = (np.r_[zs, pad], np.r_[bs, pad], np.r_[ysn, np.zeros(30)], np.r_[u, np.ones(30)])
    wide_start = tuple(np.r_[a, np.full(30, a[0])] for a in start)
    assert nwt.START_SHARE * 37 >= 6
    small_z, small_b = nwt.next_states(*wide, 0.2, wide_start)
    assert small_z[:m].tolist() == new_z.tolist() and small_b[:m].tolist() == new_b.tolist()
    assert not (small_z[m:] | small_b[m:]).any()
    monkeypatch.setattr(nwt, "START_STEPS", 0.0)  # no steps: the sign rule
    start_z, start_b = nwt.next_states(zs, bs, ysn, u, 0.2, start)
    assert start_z.tolist() == new_z.tolist() and start_b.tolist() == new_b.tolist()


def test_the_first_face_of_an_attempt_is_smaller_and_the_optimum_the_same(monkeypatch):
    # 800 rows, lam 1e5, theta 0.2: at the first direct attempt coordinate descent has left
    # many small duals the optimum sets to zero. Keeping only the members that projected
    # steps keep makes the first (largest) factored face smaller and the factor work less,
    # with the same optimum
    rng = np.random.default_rng(3)
    X = rng.random((800, 4))
    y = np.where(X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=800) > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=10.0)
    params = ODMParams(lam=1e5, theta=0.2)
    start = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=2000)
    monkeypatch.setattr(nwt, "START_STEPS", 0.0)
    plain = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=2000)
    assert start.converged and plain.converged
    assert start.newton.factored[0] < 0.9 * plain.newton.factored[0]
    assert start.newton.factor_work < plain.newton.factor_work
    assert start.objective == pytest.approx(plain.objective, rel=1e-7)
    for res in (start, plain):
        assert kernel_kkt_violation(X, y, kernel, params, res.alpha) <= 1e-3


@pytest.mark.parametrize(("face", "kkts", "pays", "attempts"), [
    (1150, list(np.geomspace(1.0, 0.3, 30)), True, 1),  # stalled 15 % above the limit
    (1090, list(np.geomspace(1.0, 0.3, 30)), True, 0),  # within 10 %: wait for the face
    (1150, [0.5 ** k for k in range(30)], False, 0),  # coordinate descent about to finish
])
def test_a_face_stalled_well_above_the_direct_limit_gets_a_block_step(face, kkts, pays,
                                                                       attempts):
    # 1,210 rows, direct limit 1,000 (7 MB budget), the face stalled at `face` rows (an
    # ijcnn1.t partition's stayed above its 6,030-row limit for 86-103 epochs): too few
    # epochs left for CG, too large a face for a direct step; a block step factors only
    # half the limit's rows, the deepest in the face
    m = 1210
    sched, f = _schedule_with_face(m, face, lam=1e6)
    assert sched.store.full and sched.direct_max == 1000
    left = nwt.epochs_left(kkts, 1e-3)
    assert left < nwt.CG_MIN_REMAINING
    assert (left >= nwt.DIRECT_WORTH * 1000 ** 2 / m) == pays
    sched.face_history = [face] * 20
    sched.after_epoch(len(kkts), kkts, np.zeros((m, 2)), f, 1e-3)
    assert sched.n_attempts == attempts
    if attempts:
        assert sched.faces.factored and max(sched.faces.factored) <= nwt.BLOCK_SHARE * 1000


def test_a_block_step_takes_a_solve_whose_face_stays_too_large_to_factor_to_the_optimum(
        monkeypatch):
    # 1,210 rows, lam 1e6 and a 7 MB budget: the face stays above 1,100 rows (the direct
    # limit is 1,000) for hundreds of epochs, which coordinate descent alone crawls through;
    # a block step on the 500 deepest rows at epoch 10 lets it shrink into direct range. The
    # same optimum as without block steps (BLOCK_FACE infinite), in under a third the epochs
    rng = np.random.default_rng(2)
    X = rng.random((1210, 4))
    y = np.where(X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=1210) > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=5.0)
    params = ODMParams(lam=1e6, theta=0.3)
    block = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=2000,
                              cache_size=7.0)
    monkeypatch.setattr(nwt, "BLOCK_FACE", np.inf)
    plain = solve_kernel_dual(X, y, kernel, params, random_state=0, max_iter=2000,
                              cache_size=7.0)
    assert block.converged and plain.converged
    assert block.newton.factored[0] == nwt.BLOCK_SHARE * 1000
    assert max(plain.newton.factored) > nwt.BLOCK_SHARE * 1000
    assert 3 * block.n_iter < plain.n_iter
    assert block.objective == pytest.approx(plain.objective, rel=1e-6)
    for res in (block, plain):
        assert kernel_kkt_violation(X, y, kernel, params, res.alpha) <= 1e-3


def test_large_faces_wait_until_coordinate_descent_stops_shrinking_them():
    # predicted faces per epoch of an ijcnn1 partition (steadily shrinking: keep sweeping)
    # and a cod-rna partition (hovering: attempt the direct Newton step)
    shrinking = [9568, 9420, 8975, 8774, 8468, 8145, 8303, 8092, 7446, 7333, 7098, 6842,
                 6693, 6727, 6664, 6313, 6234, 6126, 6185, 6014]
    hovering = [5778, 6270, 6692, 6908, 6966, 7095, 8172, 6853, 7391, 6759]
    assert not any(nwt.face_stalled(shrinking[:e]) for e in range(1, len(shrinking) + 1))
    assert not any(nwt.face_stalled(hovering[:e]) for e in range(1, len(hovering)))
    assert nwt.face_stalled(hovering)


def _sequential_sweep(order, K, kdiag, y, alpha, f, dz, db, theta):
    """Reference: one coordinate update at a time, ``f`` updated after each."""
    for i in order:
        z, b = alpha[i]
        r = y[i] * f[i] - kdiag[i] * (z - b)
        nz = (1 - theta - r) / (kdiag[i] + dz[i]) if r < 1 - theta else 0.0
        nb = (r - 1 - theta) / (kdiag[i] + db[i]) if r > 1 + theta else 0.0
        f += ((nz - nb) - (z - b)) * y[i] * K[i]
        alpha[i] = nz, nb


@pytest.mark.parametrize("all_cached", [True, False])
def test_the_blocked_sweep_makes_the_sequential_updates(all_cached):
    """``kernel_sweep`` applies its updates to ``f`` four columns at a time but decides each
    one on the margin the updates before it left: the same duals and margins as one update
    at a time, with rows visited twice in one block (merged duplicates); where a column is
    not cached it stops there with ``f`` whole."""
    X, y = _data(m=80, seed=3)
    K = kernel_matrix(Kernel("rbf", gamma=2.0), X, X)
    params = ODMParams(lam=30.0, theta=0.3)
    dz, db = diag_vectors(params, 80.0, 80)
    rng = np.random.default_rng(1)
    order = rng.permutation(np.r_[np.arange(80), np.arange(0, 80, 7)]).astype(np.int64)
    slot = np.arange(80, dtype=np.int64)
    # not cached: the row first visited at position q (>= 50) of the order
    q = next(q for q in range(50, len(order)) if order[q] not in order[:q])
    if not all_cached:
        slot[order[q]] = -1
    alpha, f = np.zeros((80, 2)), np.zeros(80)
    ref_a, ref_f = alpha.copy(), f.copy()
    kdiag = np.diag(K).copy()
    stats = np.zeros(3)
    for _ in range(3):  # three epochs, from a cold start
        p = nk.kernel_sweep(order, 0, len(order), slot, K, np.zeros(80, dtype=np.int64), 1,
                            kdiag, y, alpha, f, dz, db, params.theta,
                            np.ones(80, dtype=np.bool_), np.inf, False, stats, 0.0, 0.0)
        stop = p if p < len(order) else len(order)
        _sequential_sweep(order[:stop], K, kdiag, y, ref_a, ref_f, dz, db, params.theta)
        np.testing.assert_allclose(alpha, ref_a, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(f, K @ (y * (alpha[:, 0] - alpha[:, 1])), atol=1e-10)
        if not all_cached:
            assert p == q and stats[2] > 10
            break
    assert stats[2] > (200 if all_cached else 10)


def test_the_sweep_leaves_small_face_updates_out():
    """With ``skip_face`` a row with a nonzero dual whose violation is at most that keeps
    its duals, while rows at zero and face rows above it are updated as one at a time would
    update them; ``f`` stays ``K nu``, and the solve that skips them (``FACE_SKIP_SHARE``)
    meets the tolerance at the optimum's objective, as the one that does not."""
    X, y = _data(m=80, seed=3)
    K = kernel_matrix(Kernel("rbf", gamma=2.0), X, X)
    params = ODMParams(lam=30.0, theta=0.3)
    dz, db = diag_vectors(params, 80.0, 80)
    kdiag = np.diag(K).copy()
    order = np.random.default_rng(1).permutation(80).astype(np.int64)
    slot = np.arange(80, dtype=np.int64)
    alpha, f = np.zeros((80, 2)), np.zeros(80)

    def sweep(skip_face):
        stats = np.zeros(3)
        nk.kernel_sweep(order, 0, 80, slot, K, np.zeros(80, dtype=np.int64), 1, kdiag, y,
                        alpha, f, dz, db, params.theta, np.ones(80, dtype=np.bool_), np.inf,
                        False, stats, 0.0, skip_face)
        return stats

    sweep(0.0)
    viol = nk.pair_violations(f, y, alpha, dz, db, params.theta, np.empty(80))
    face = (alpha > 0).any(axis=1)
    thr = float(np.median(viol[face]))
    ref_a, ref_f = alpha.copy(), f.copy()
    skipped = moved_zero = 0
    for i in order:  # the reference: one update at a time, small face steps left out
        z, b = ref_a[i]
        one = slice(i, i + 1)
        v = nk.pair_violations(ref_f[one], y[one], ref_a[one], dz[one], db[one], params.theta,
                               np.empty(1))[0]
        if (z > 0 or b > 0) and v <= thr:
            skipped += 1
            continue
        moved_zero += z == 0 and b == 0 and v > 0
        _sequential_sweep([i], K, kdiag, y, ref_a, ref_f, dz, db, params.theta)
    stats = sweep(thr)
    assert skipped >= 10 and moved_zero >= 1
    np.testing.assert_allclose(alpha, ref_a, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(f, K @ (y * (alpha[:, 0] - alpha[:, 1])), atol=1e-10)
    assert stats[2] <= 80 - skipped

    kernel = Kernel("rbf", gamma=2.0)
    exact = solve_kernel_dual(X, y, kernel, params, tol=TOL, random_state=0)
    assert exact.converged and exact.kkt_violation <= TOL
    for tol in (1e-3, TOL):
        res = solve_kernel_dual(X, y, kernel, params, tol=tol, random_state=0)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("solver.exact.dcd_kernel.FACE_SKIP_SHARE", 0.0)
            every = solve_kernel_dual(X, y, kernel, params, tol=tol, random_state=0)
        assert res.converged and every.converged and res.kkt_violation <= tol
        assert res.objective == pytest.approx(exact.objective, rel=100 * tol)
        assert every.objective == pytest.approx(exact.objective, rel=100 * tol)
    np.testing.assert_allclose(res.alpha, exact.alpha, atol=1e-7)  # res: the tol=TOL solve


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_combination_sums_the_rows_four_at_a_time(dtype):
    """``rows_combination`` adds four rows per pass and the rest one by one, skipping zero
    coefficients and repeated rows alike: ``K[:, rows] @ coef`` for every count of nonzero
    terms modulo four, from any-dtype rows."""
    rng = np.random.default_rng(5)
    K = rng.normal(size=(40, 23)).astype(dtype)
    for k in (0, 1, 3, 4, 5, 9, 14):
        rows = rng.integers(0, 40, size=k + 3).astype(np.int64)
        coef = rng.normal(size=k + 3)
        coef[rng.permutation(k + 3)[:3]] = 0.0  # three zero terms among them
        out = nk.rows_combination(K, rows, coef, np.full(23, np.nan))
        np.testing.assert_allclose(out, coef @ K[rows].astype(np.float64), rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.parametrize("lower", [False, True])
def test_factor_solve_matches_the_lapack_solve(lower):
    """``factor_solve`` solves few right-hand sides by two ``trsv`` each and more through
    ``cho_solve``: the same solution either way, for either triangle, vector or columns, in
    the factor's dtype."""
    from scipy.linalg import cho_solve

    rng = np.random.default_rng(2)
    G = rng.normal(size=(60, 60))
    for dtype, rtol in ((np.float32, 1e-4), (np.float64, 1e-11)):
        A = (G @ G.T + 60 * np.eye(60)).astype(dtype)
        fac = cho_factor(A, lower=lower)
        for shape in ((60,), (60, 1), (60, nwt.FEW_RHS), (60, nwt.FEW_RHS + 3)):
            B = rng.normal(size=shape).astype(dtype)
            x = nwt.factor_solve(fac, B)
            assert x.dtype == dtype and x.shape == shape
            np.testing.assert_allclose(x, cho_solve(fac, B), rtol=rtol, atol=rtol)
            np.testing.assert_allclose(A.astype(np.float64) @ x, B, rtol=10 * rtol,
                                       atol=10 * rtol)
