"""Behaviour of ODMClassifier / SODMClassifier: labels, one-vs-rest, sparse input, validation,
reproducibility, intercept and scaling, callbacks, and accuracy on real LIBSVM data."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file, make_blobs
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler
from sklearn.svm import SVC

from solver import FitCancelled, ODMClassifier, SODMClassifier
from solver.estimators import BASELINE_ESTIMATORS, build_fitted


def load_libsvm(path: Path, n_features: int | None = None):
    """A shared LIBSVM .xz file as (dense float64 X, y)."""
    with lzma.open(path, "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=n_features)
    return X.toarray(), y


@pytest.fixture(scope="module")
def blobs2():
    X, y = make_blobs(n_samples=120, centers=[[0, 0], [3, 3]], cluster_std=1.0, random_state=1)
    return X, y


@pytest.fixture(scope="module")
def blobs3():
    X, y = make_blobs(n_samples=150, centers=[[0, 0], [4, 0], [2, 4]], cluster_std=0.8,
                      random_state=2)
    return X, y


# ------------------------------------------------------------------------------------ labels
@pytest.mark.parametrize("labels", [(3, 7), (-1.5, 2.5), ("cat", "dog"), (True, False)])
def test_any_two_labels_smaller_is_negative(blobs2, labels):
    X, y01 = blobs2
    lo, hi = sorted(labels)
    y = np.where(y01 == 1, hi, lo).astype(object if isinstance(lo, str) else type(lo))
    est = ODMClassifier(kernel="linear", random_state=0).fit(X, y)
    assert list(est.classes_) == [lo, hi]
    f = est.decision_function(X)
    assert f.shape == (len(X),)
    # the larger label is the positive class: blob 1 (around (3,3)) scores positive
    assert np.mean(f[y01 == 1] > 0) > 0.9 and np.mean(f[y01 == 0] < 0) > 0.9
    pred = est.predict(X)
    assert set(pred.tolist()) <= {lo, hi}
    assert np.array_equal(pred, np.where(f > 0, hi, lo).astype(pred.dtype))
    assert est.score(X, y) > 0.9


def test_one_vs_rest_three_classes(blobs3):
    X, y = blobs3
    y = np.array(["a", "b", "c"])[y]
    est = ODMClassifier(kernel="rbf", random_state=0).fit(X, y)
    F = est.decision_function(X)
    assert F.shape == (len(X), 3)
    assert np.array_equal(est.predict(X), est.classes_[np.argmax(F, axis=1)])
    assert est.score(X, y) > 0.9
    assert est.dual_coef_.shape == (3, est.support_vectors_.shape[0])
    assert est.n_support_.shape == (3,) and np.all(est.n_support_ > 0)
    assert est.n_iter_.shape == (3,)
    # each one-vs-rest column scores its own class highest on average
    for k, c in enumerate(est.classes_):
        assert F[y == c, k].mean() > F[y != c, k].mean()
    # histories are tagged with the problem and class
    assert {rec["class"] for rec in est.history_} == {"a", "b", "c"}


def test_one_vs_rest_linear_has_one_w_row_per_class(blobs3):
    X, y = blobs3
    est = ODMClassifier(kernel="linear", random_state=0).fit(X, y)
    assert est.w_.shape == (3, X.shape[1] + 1)
    assert est.score(X, y) > 0.85


# ----------------------------------------------------------------------------- input checks
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_raises(blobs2, bad):
    X, y = blobs2
    X = X.copy()
    X[3, 1] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        ODMClassifier().fit(X, y)
    est = ODMClassifier(kernel="linear").fit(blobs2[0], y)
    with pytest.raises(ValueError, match="NaN|infinity"):
        est.predict(X)


def test_empty_input_raises(blobs2):
    with pytest.raises(ValueError, match="0 sample"):
        ODMClassifier().fit(np.zeros((0, 2)), np.zeros(0))
    with pytest.raises(ValueError, match="0 feature"):
        ODMClassifier().fit(np.zeros((5, 0)), np.arange(5) % 2)
    est = ODMClassifier(kernel="linear").fit(*blobs2)
    with pytest.raises(ValueError, match="0 sample"):
        est.predict(np.zeros((0, 2)))


def test_one_class_and_feature_mismatch_raise(blobs2):
    X, y = blobs2
    with pytest.raises(ValueError, match="class"):
        ODMClassifier().fit(X, np.ones(len(X)))
    est = ODMClassifier(kernel="linear").fit(X, y)
    with pytest.raises(ValueError, match="features"):
        est.predict(np.ones((2, 3)))


@pytest.mark.parametrize(
    ("cls", "param", "value"),
    [
        (ODMClassifier, "kernel", "sigmoid"),
        (ODMClassifier, "gamma", -1.0),
        (ODMClassifier, "gamma", "wide"),
        (ODMClassifier, "lam", "automatic"),
        (ODMClassifier, "lam", 0.0),
        (ODMClassifier, "upsilon", -0.1),
        (ODMClassifier, "theta", 1.0),
        (ODMClassifier, "tol", 0),
        (ODMClassifier, "max_iter", 0),
        (ODMClassifier, "degree", 0),
        (ODMClassifier, "random_state", "seed"),
        (SODMClassifier, "p", 1),
        (SODMClassifier, "levels", -1),
        (SODMClassifier, "warm_start_scaling", "hot"),
        (SODMClassifier, "n_jobs", 0),
        (SODMClassifier, "epochs", 0),
        (SODMClassifier, "step_size", -0.1),
        (SODMClassifier, "linear_solver", "sgd"),
        (BASELINE_ESTIMATORS["cascade"], "warm_start_scaling", "hot"),
        (BASELINE_ESTIMATORS["cascade"], "levels", -1),
        (BASELINE_ESTIMATORS["dip"], "n_clusters", 0),
        (BASELINE_ESTIMATORS["dc"], "fanout", 0),
        (BASELINE_ESTIMATORS["dc"], "n_jobs", 0),
        (BASELINE_ESTIMATORS["svrg"], "kernel", "rbf"),
        (BASELINE_ESTIMATORS["svrg"], "epochs", 0),
        (BASELINE_ESTIMATORS["svrg"], "step_size", -0.1),
    ],
)
def test_bad_parameters_raise_naming_the_parameter(blobs2, cls, param, value):
    est = cls(**{param: value})
    with pytest.raises(ValueError, match=param):
        est.validate_params()
    with pytest.raises(ValueError, match=param):
        est.fit(*blobs2)


# ----------------------------------------------------------------------------------- sparse
@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly"])
def test_sparse_equals_dense(kernel):
    rng = np.random.default_rng(0)
    X = rng.random((80, 6)) * (rng.random((80, 6)) < 0.5)  # non-negative, half zeros
    y = (X[:, 0] + X[:, 1] - X[:, 2] > 0.3).astype(int)
    dense = ODMClassifier(kernel=kernel, random_state=0, tol=1e-6).fit(X, y)
    sparse = ODMClassifier(kernel=kernel, random_state=0, tol=1e-6).fit(sp.csr_matrix(X), y)
    f_dense = dense.decision_function(X)
    np.testing.assert_allclose(sparse.decision_function(sp.csr_matrix(X)), f_dense,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sparse.decision_function(X), f_dense, rtol=1e-6, atol=1e-6)
    if kernel != "linear":
        assert sp.issparse(sparse.support_vectors_)
        assert not sp.issparse(dense.support_vectors_)


def test_sparse_with_negative_values_is_shifted_like_dense():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 4)) * (rng.random((60, 4)) < 0.6)
    y = (X[:, 0] > 0).astype(int)
    a = ODMClassifier(kernel="rbf", random_state=0, tol=1e-6).fit(X, y)
    b = ODMClassifier(kernel="rbf", random_state=0, tol=1e-6).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(b.decision_function(X), a.decision_function(X), atol=1e-6)


# -------------------------------------------------------------------------- reproducibility
def test_random_state_reproducible(blobs3):
    X, y = blobs3
    a = ODMClassifier(kernel="rbf", random_state=5, tol=1e-2).fit(X, y)
    b = ODMClassifier(kernel="rbf", random_state=5, tol=1e-2).fit(X, y)
    assert np.array_equal(a.decision_function(X), b.decision_function(X))
    assert np.array_equal(a.support_, b.support_)
    assert a.fit_info_["seed"] == 5


# ------------------------------------------------------------------------ intercept/scaling
def test_fit_intercept_adds_a_bias():
    # 1-D data separated at x = 0.7 (after scaling): a model through the origin cannot do it.
    rng = np.random.default_rng(3)
    x = rng.random(200)
    X = np.column_stack([x])
    y = (x > 0.7).astype(int)
    with_b = ODMClassifier(kernel="linear", fit_intercept=True, random_state=0).fit(X, y)
    without = ODMClassifier(kernel="linear", fit_intercept=False, random_state=0).fit(X, y)
    assert with_b.w_.shape == (1, 2) and without.w_.shape == (1, 1)
    assert with_b.score(X, y) > 0.95
    assert without.score(X, y) < 0.8
    # without an intercept f(x) = w * x_scaled exactly (the paper's model)
    xs = (x - x.min()) / (x.max() - x.min())
    np.testing.assert_allclose(without.decision_function(X), without.w_[0, 0] * xs, rtol=1e-12)


def test_scaling_makes_the_model_invariant_to_feature_units(blobs2):
    X, y = blobs2
    X2 = X * np.array([1000.0, 0.001]) + np.array([5.0, -3.0])
    a = ODMClassifier(kernel="rbf", random_state=0, tol=1e-6).fit(X, y)
    b = ODMClassifier(kernel="rbf", random_state=0, tol=1e-6).fit(X2, y)
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X2), atol=1e-6)
    assert a.gamma_ == pytest.approx(b.gamma_)
    # the stored support vectors live in the scaled [0, 1] space
    assert a.support_vectors_.min() >= 0 and a.support_vectors_.max() <= 1
    # without scaling the units matter: a unit-less gamma on the stretched data generalizes
    # badly to new points
    Xt, yt = make_blobs(n_samples=100, centers=[[0, 0], [3, 3]], random_state=11)
    Xt2 = Xt * np.array([1000.0, 0.001]) + np.array([5.0, -3.0])
    c = ODMClassifier(kernel="rbf", gamma=1.0, scale=False, random_state=0).fit(X2, y)
    assert a.score(Xt, yt) > 0.9
    assert c.score(Xt2, yt) < a.score(Xt, yt) - 0.1


def test_constant_feature_is_harmless(blobs2):
    X, y = blobs2
    Xc = np.column_stack([X, np.full(len(X), 7.0)])
    for kernel in ("linear", "rbf"):
        a = ODMClassifier(kernel=kernel, gamma=2.0, random_state=0, tol=1e-6).fit(X, y)
        b = ODMClassifier(kernel=kernel, gamma=2.0, random_state=0, tol=1e-6).fit(Xc, y)
        np.testing.assert_allclose(b.decision_function(Xc), a.decision_function(X), atol=1e-6)


def test_gamma_scale_and_number(blobs2):
    X, y = blobs2
    est = ODMClassifier(kernel="rbf").fit(X, y)
    Xs = (X - X.min(0)) / (X.max(0) - X.min(0))
    assert est.gamma_ == pytest.approx(1.0 / (X.shape[1] * Xs.var()))
    assert ODMClassifier(kernel="rbf", gamma=2.5).fit(X, y).gamma_ == 2.5


# ----------------------------------------------------------------------------- callbacks
def test_progress_and_validation_history(blobs3):
    X, y = blobs3
    calls = []
    est = ODMClassifier(kernel="rbf", random_state=0)
    est.fit(X, y, X_val=X[:40], y_val=y[:40],
            progress=lambda f, msg, rec: calls.append((f, msg, dict(rec))))
    fractions = [c[0] for c in calls]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert all(0.0 <= f <= 1.0 for f in fractions)
    assert len(est.history_) == 3
    assert all(0.8 <= rec["val_accuracy"] <= 1.0 for rec in est.history_)


@pytest.mark.parametrize("cls", [ODMClassifier, SODMClassifier])
def test_should_stop_raises_fit_cancelled(blobs2, cls):
    X, y = blobs2
    est = cls(kernel="rbf", random_state=0)
    with pytest.raises(FitCancelled):
        est.fit(X, y, should_stop=lambda: True)
    assert not hasattr(est, "classes_")


# ---------------------------------------------------------------------------- build_fitted
def test_build_fitted_from_parts_reproduces_the_model(blobs3):
    X, y = blobs3
    src = ODMClassifier(kernel="poly", degree=2, random_state=0).fit(X, y)
    dst = build_fitted(ODMClassifier(**src.get_params()), classes=src.classes_,
                       n_features_in=src.n_features_in_, scaler_min=src._scaler.min_,
                       scaler_scale=src._scaler.scale_, gamma=src.gamma_,
                       support_vectors=src.support_vectors_, dual_coef=src.dual_coef_,
                       n_support=src.n_support_)
    assert np.array_equal(dst.decision_function(X), src.decision_function(X))
    with pytest.raises(ValueError, match="dual_coef"):
        build_fitted(ODMClassifier(**src.get_params()), classes=src.classes_,
                     n_features_in=src.n_features_in_, scaler_min=src._scaler.min_,
                     scaler_scale=src._scaler.scale_, gamma=src.gamma_,
                     support_vectors=src.support_vectors_, dual_coef=src.dual_coef_[:, :-1],
                     n_support=src.n_support_)


# ------------------------------------------------------------------------ real data / SODM
@pytest.fixture(scope="module")
def svmguide1(datasets_dir):
    Xtr, ytr = load_libsvm(datasets_dir / "svmguide1.xz", n_features=4)
    Xte, yte = load_libsvm(datasets_dir / "svmguide1.t.xz", n_features=4)
    return Xtr, ytr, Xte, yte


@pytest.fixture(scope="module")
def heart(datasets_dir):
    X, y = load_libsvm(datasets_dir / "heart_scale.xz", n_features=13)
    return train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)


def _svc_accuracy(Xtr, ytr, Xte, yte, C, gamma):
    sc = MinMaxScaler().fit(Xtr)
    svc = SVC(C=C, gamma=gamma).fit(sc.transform(Xtr), ytr)
    return svc.score(sc.transform(Xte), yte)


def test_odm_rbf_on_svmguide1_matches_svc(svmguide1):
    Xtr, ytr, Xte, yte = svmguide1
    odm = ODMClassifier(kernel="rbf", gamma=2.5, lam=1e4, upsilon=0.2, theta=0.2,
                        random_state=0).fit(Xtr, ytr)
    acc = odm.score(Xte, yte)
    svc = _svc_accuracy(Xtr, ytr, Xte, yte, C=100, gamma=2.5)
    assert acc > 0.95
    assert acc >= svc - 0.01
    assert set(np.unique(odm.predict(Xte))) == {0.0, 1.0}


def test_odm_linear_on_svmguide1_is_sensible(svmguide1):
    Xtr, ytr, Xte, yte = svmguide1
    odm = ODMClassifier(kernel="linear", lam=1e4, upsilon=0.2, random_state=0).fit(Xtr, ytr)
    assert odm.score(Xte, yte) > 0.93


def test_odm_on_heart_scale_matches_svc(heart):
    Xtr, Xte, ytr, yte = heart
    odm = ODMClassifier(kernel="rbf", lam=100.0, random_state=0).fit(Xtr, ytr)
    svc = _svc_accuracy(Xtr, ytr, Xte, yte, C=1.0, gamma="scale")
    acc = odm.score(Xte, yte)
    assert acc > 0.75
    assert acc >= svc - 0.06


def test_sodm_one_partition_equals_exact_odm(heart):
    Xtr, _, ytr, _ = heart
    kw = dict(kernel="rbf", lam=100.0, tol=1e-8, max_iter=5000, random_state=0)
    exact = ODMClassifier(**kw).fit(Xtr, ytr)
    sodm = SODMClassifier(levels=0, **kw).fit(Xtr, ytr)
    np.testing.assert_allclose(sodm.decision_function(Xtr), exact.decision_function(Xtr),
                               rtol=1e-6, atol=1e-6)


def test_sodm_final_global_solve_reaches_exact_odm(heart):
    Xtr, Xte, ytr, _ = heart
    kw = dict(kernel="rbf", lam=100.0, tol=1e-8, max_iter=5000, random_state=0)
    exact = ODMClassifier(**kw).fit(Xtr, ytr)
    sodm = SODMClassifier(p=2, levels=2, n_strata=4, final_global_solve=True, **kw)
    sodm.fit(Xtr, ytr)
    np.testing.assert_allclose(sodm.decision_function(Xte), exact.decision_function(Xte),
                               rtol=1e-5, atol=1e-5)
    assert sodm.fit_info_["algorithm"] == "sodm-hierarchical"


def test_sodm_kernel_on_svmguide1(svmguide1):
    Xtr, ytr, Xte, yte = svmguide1
    calls = []
    sodm = SODMClassifier(kernel="rbf", gamma=2.5, lam=1e4, upsilon=0.2, p=2, levels=2,
                          random_state=0)
    sodm.fit(Xtr, ytr, X_val=Xte[:500], y_val=yte[:500],
             progress=lambda f, m, r: calls.append(f))
    assert sodm.score(Xte, yte) > 0.93
    assert len(sodm.history_) >= 1 and calls and calls[-1] == pytest.approx(1.0)
    again = SODMClassifier(**sodm.get_params()).fit(Xtr, ytr)
    assert np.array_equal(again.decision_function(Xte), sodm.decision_function(Xte))


def test_sodm_linear_dsvrg_close_to_exact_linear(svmguide1):
    Xtr, ytr, Xte, yte = svmguide1
    exact = ODMClassifier(kernel="linear", lam=1e3, random_state=0).fit(Xtr, ytr)
    sodm = SODMClassifier(kernel="linear", lam=1e3, random_state=0).fit(Xtr, ytr)
    assert sodm.fit_info_["algorithm"] == "sodm-dsvrg"
    assert sodm.w_.shape == exact.w_.shape == (1, 5)
    assert sodm.score(Xte, yte) >= exact.score(Xte, yte) - 0.02
    again = SODMClassifier(kernel="linear", lam=1e3, random_state=0).fit(Xtr, ytr)
    assert np.array_equal(again.w_, sodm.w_)


def test_sodm_one_vs_rest(blobs3):
    X, y = blobs3
    est = SODMClassifier(kernel="rbf", p=2, levels=1, random_state=0).fit(X, y)
    assert est.decision_function(X).shape == (len(X), 3)
    assert est.score(X, y) > 0.85
    assert {rec["problem"] for rec in est.history_} == {0, 1, 2}


def test_sodm_output_is_on_the_odm_margin_scale(svmguide1):
    """Without a final solve the stored duals average the last level's local ODMs: the same
    predictions as the paper's concatenated output, margins on the exact ODM's scale."""
    from solver.core.formulation import ODMParams
    from solver.core.kernels import Kernel
    from solver.margins import margin_stats
    from solver.sodm.hierarchy import sodm_kernel

    Xtr, ytr, Xte, yte = svmguide1
    rows = np.random.default_rng(0).choice(len(ytr), 1200, replace=False)
    sc = MinMaxScaler().fit(Xtr[rows])
    Xtr, ytr, Xte = sc.transform(Xtr[rows]), ytr[rows], sc.transform(Xte)
    kw = dict(kernel="rbf", gamma=2.5, lam=1e3, scale=False, fit_intercept=False,
              random_state=0)
    est = SODMClassifier(p=2, levels=2, **kw).fit(Xtr, ytr)
    exact = ODMClassifier(**kw).fit(Xtr, ytr)
    y_pm = np.where(ytr == 1, 1.0, -1.0)
    raw = sodm_kernel(Xtr, y_pm, Kernel("rbf", gamma=2.5), ODMParams(lam=1e3), p=2, levels=2,
                      random_state=0).alpha
    coef = y_pm * (raw[:, 0] - raw[:, 1])
    from solver.core.kernels import kernel_matrix

    f_raw = kernel_matrix(Kernel("rbf", gamma=2.5), Xte, Xtr) @ coef
    f_est = est.decision_function(Xte)
    assert np.mean(np.sign(f_raw) == np.sign(f_est)) > 0.99
    m_est = margin_stats(est, Xtr, ytr)["mean"]
    m_exact = margin_stats(exact, Xtr, ytr)["mean"]
    m_raw = float(np.mean(y_pm * (kernel_matrix(Kernel("rbf", gamma=2.5), Xtr, Xtr) @ coef)))
    assert abs(m_est - m_exact) < 0.05  # measured: 0.809 vs 0.808 (concatenation 1.619)
    assert m_raw > 1.5 * m_exact  # the concatenation is about p**level times too large


# ------------------------------------------------------------------------ baseline estimators
@pytest.mark.parametrize("algorithm", ["cascade", "dip", "dc", "svrg"])
def test_baseline_estimators_train_on_heart_scale(heart, algorithm):
    from solver.estimators import BASELINE_ESTIMATORS as ESTIMATORS

    Xtr, Xte, ytr, yte = heart
    cls = ESTIMATORS[algorithm]
    kw = {"levels": 1} if algorithm != "svrg" else {}
    est = cls(lam=100.0, random_state=0, **kw)
    est.validate_params()
    calls = []
    est.fit(Xtr, ytr, progress=lambda f, m, r: calls.append(f))
    assert est.fit_info_["algorithm"] == algorithm
    assert est.score(Xte, yte) > 0.75
    assert calls and 0 < calls[-1] <= 1.0
    again = cls(lam=100.0, random_state=0, **kw).fit(Xtr, ytr)
    assert np.array_equal(again.decision_function(Xte), est.decision_function(Xte))


def test_svrg_baseline_is_linear_only():
    from solver.estimators import SVRGODMClassifier

    with pytest.raises(ValueError, match="kernel"):
        SVRGODMClassifier(kernel="rbf").validate_params()


@pytest.mark.parametrize(
    "kw",
    [dict(kernel="rbf", levels=2, n_strata=5), dict(kernel="linear"),
     dict(kernel="linear", linear_solver="hierarchical", levels=1)],
    ids=["rbf", "linear-dsvrg", "linear-hierarchical"],
)
def test_sodm_sparse_equals_dense(kw):
    rng = np.random.default_rng(0)
    X = rng.random((400, 6)) * (rng.random((400, 6)) < 0.5)
    y = (X[:, 0] + X[:, 1] - X[:, 2] > 0.3).astype(int)
    dense = SODMClassifier(random_state=0, tol=1e-6, **kw).fit(X, y)
    sparse = SODMClassifier(random_state=0, tol=1e-6, **kw).fit(sp.csr_matrix(X), y)
    # the two inputs' kernel values differ in the last bits (sparse and dense products), and
    # the Newton steps' float32 factor solves round those apart by a few 1e-9 of the decision
    # (both fits within tol): agreement to 1e-7, far below any error of the sparse path
    np.testing.assert_allclose(sparse.decision_function(X), dense.decision_function(X),
                               atol=1e-7)
    assert dense.score(X, y) > 0.9
    expected = "sodm-dsvrg" if kw.get("linear_solver", "dsvrg") == "dsvrg" and \
        kw["kernel"] == "linear" else "sodm-hierarchical"
    assert dense.fit_info_["algorithm"] == expected


def test_sodm_linear_tol_is_dsvrgs_relative_gradient_tolerance(svmguide1):
    Xtr, ytr, _, _ = svmguide1
    fits = {tol: SODMClassifier(kernel="linear", lam=1e3, tol=tol, random_state=0,
                                epochs=100).fit(Xtr, ytr) for tol in (1e-2, 1e-8)}
    assert len(fits[1e-2].history_) < len(fits[1e-8].history_)
    g_loose, g_tight = (f.history_[-1]["grad_norm"] for f in fits.values())
    assert g_tight < 1e-4 * g_loose
