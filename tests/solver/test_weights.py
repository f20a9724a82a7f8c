"""Sample and class weights: an integer weight is the row repeated, for every solver and
estimator; ``class_weight`` is a per-class ``sample_weight``; bad weights are refused."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import make_classification

from solver import ODMClassifier, SODMClassifier
from solver.core.formulation import ODMParams, dual_objective
from solver.core.kernels import Kernel, kernel_matrix
from solver.estimators import BASELINE_ESTIMATORS as BASELINES
from solver.exact.dcd_kernel import solve_kernel_dual
from solver.exceptions import InvalidParameterError
from solver.linear.dcd_linear import solve_linear_dual

TOL = 1e-9


def _data(n: int = 90, d: int = 5, classes: int = 2, seed: int = 0):
    X, y = make_classification(n_samples=n, n_features=d, n_informative=3, n_redundant=0,
                               n_classes=classes, n_clusters_per_class=1, random_state=seed)
    sw = np.random.default_rng(seed).integers(0, 4, size=n)
    return X, y, sw


ESTIMATORS = {
    "odm-rbf": ODMClassifier(kernel="rbf", tol=TOL, random_state=0),
    "odm-linear": ODMClassifier(kernel="linear", tol=TOL, random_state=0),
    "sodm-rbf": SODMClassifier(kernel="rbf", p=2, levels=1, final_global_solve=True, tol=TOL,
                               random_state=0),
    "sodm-linear-hierarchical": SODMClassifier(kernel="linear", linear_solver="hierarchical",
                                               p=2, levels=1, final_global_solve=True,
                                               tol=TOL, random_state=0),
    "sodm-dsvrg": SODMClassifier(kernel="linear", lam=10.0, tol=1e-12, epochs=400,
                                 random_state=0),
    # Ca-ODM / DiP-ODM solve their root on the children's support vectors, the exact ODM
    # when no true support vector was dropped: theta = 0 (a band of width 0) keeps every row
    "cascade": BASELINES["cascade"](levels=1, theta=0.0, tol=TOL, random_state=0),
    "dip": BASELINES["dip"](levels=1, n_clusters=3, theta=0.0, tol=TOL, random_state=0),
    "dc": BASELINES["dc"](levels=1, fanout=2, tol=TOL, random_state=0),
    "svrg": BASELINES["svrg"](lam=10.0, tol=1e-12, epochs=400, random_state=0),
}


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
@pytest.mark.parametrize("classes", [2, 3])
def test_integer_weights_are_repeated_rows(name, classes):
    """Each estimator: integer weights (zeros included) give the model of the rows repeated
    (zero: removed), to the solver's tolerance."""
    X, y, sw = _data(classes=classes)
    est = ESTIMATORS[name]
    weighted = clone(est).fit(X, y, sample_weight=sw)
    repeated = clone(est).fit(np.repeat(X, sw, axis=0), np.repeat(y, sw))
    fw, fr = weighted.decision_function(X), repeated.decision_function(X)
    np.testing.assert_allclose(fw, fr, rtol=1e-6, atol=1e-6 * np.abs(fr).max())
    # and the weights matter: the unweighted model is a different one
    plain = clone(est).fit(X, y).decision_function(X)
    assert np.abs(plain - fr).max() > 1e-3


def test_weights_on_sparse_rows():
    X, y, sw = _data()
    est = ODMClassifier(kernel="linear", tol=TOL, random_state=0)
    dense = clone(est).fit(X, y, sample_weight=sw).decision_function(X)
    sparse = clone(est).fit(sp.csr_matrix(X), y, sample_weight=sw).decision_function(X)
    np.testing.assert_allclose(sparse, dense, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("newton", [True, False])
def test_kernel_dual_weights_equal_repeats(newton):
    """The dual with weights c_i is the dual of the repeated rows: the copies' duals sum to the
    weighted row's, with the same objective."""
    X, y, _ = _data(n=40)
    y = np.where(y == 1, 1.0, -1.0)
    c = np.random.default_rng(1).integers(1, 4, size=len(y))
    params, kernel = ODMParams(lam=100.0, theta=0.2), Kernel("rbf", gamma=0.5)
    w = solve_kernel_dual(X, y, kernel, params, tol=1e-11, max_iter=20000, random_state=0,
                          newton=newton, sample_weight=c)
    # the copies solved as copies (merged, they would be the weighted problem by construction)
    r = solve_kernel_dual(np.repeat(X, c, axis=0), np.repeat(y, c), kernel, params,
                          tol=1e-11, max_iter=20000, random_state=0, newton=newton,
                          merge_duplicates=False)
    owner = np.repeat(np.arange(len(y)), c)
    summed = np.zeros((len(y), 2))
    np.add.at(summed, owner, r.alpha)
    np.testing.assert_allclose(w.alpha, summed, atol=1e-8)
    assert w.objective == pytest.approx(r.objective, rel=1e-8)
    K = kernel_matrix(kernel, X)
    assert dual_objective(K * np.outer(y, y), w.alpha, params, sample_weight=c) == \
        pytest.approx(w.objective, rel=1e-9)


@pytest.mark.parametrize("newton", [True, False])
@pytest.mark.parametrize("sparse", [False, True])
def test_linear_dual_weights_equal_repeats(newton, sparse):
    X, y, _ = _data(n=60)
    y = np.where(y == 1, 1.0, -1.0)
    c = np.random.default_rng(2).integers(1, 5, size=len(y)).astype(float)
    params = ODMParams(lam=50.0, theta=0.3)
    Xw, Xr = (sp.csr_matrix(X), sp.csr_matrix(np.repeat(X, c.astype(int), axis=0))) \
        if sparse else (X, np.repeat(X, c.astype(int), axis=0))
    w = solve_linear_dual(Xw, y, params, tol=1e-11, max_iter=50000, random_state=0,
                          newton=newton, sample_weight=c)
    r = solve_linear_dual(Xr, np.repeat(y, c.astype(int)), params, tol=1e-11,
                          max_iter=50000, random_state=0, newton=newton)
    np.testing.assert_allclose(w.w, r.w, atol=1e-8)
    assert w.converged and r.converged


def test_weights_scale_invariant():
    """Multiplying every weight by a constant is the same problem (M is the weights' sum)."""
    X, y, _ = _data()
    c = np.random.default_rng(3).uniform(0.2, 3.0, size=len(y))
    est = ODMClassifier(kernel="rbf", tol=TOL, random_state=0)
    a = clone(est).fit(X, y, sample_weight=c).decision_function(X)
    b = clone(est).fit(X, y, sample_weight=7.5 * c).decision_function(X)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_class_weight_balanced_and_dict():
    X, y, sw = _data(n=120, classes=3)
    keep = (y != 2) | (np.arange(len(y)) % 4 == 0)  # class 2 a minority
    X, y, sw = X[keep], y[keep], sw[keep] + 1
    counts = np.bincount(y)
    balanced = len(y) / (3 * counts)
    est = ODMClassifier(kernel="rbf", tol=TOL, random_state=0)
    a = clone(est).set_params(class_weight="balanced").fit(X, y, sample_weight=sw)
    b = clone(est).fit(X, y, sample_weight=sw * balanced[y])
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-7,
                               atol=1e-9)
    assert a.fit_info_["weights"]["class_weight"] == "balanced"
    c = clone(est).set_params(class_weight={2: 4.0}).fit(X, y)
    d = clone(est).fit(X, y, sample_weight=np.where(y == 2, 4.0, 1.0))
    np.testing.assert_allclose(c.decision_function(X), d.decision_function(X), rtol=1e-7,
                               atol=1e-9)


def test_class_weight_string_labels():
    X, y, _ = _data()
    labels = np.where(y == 1, "fraud", "ok")
    est = ODMClassifier(kernel="linear", tol=TOL, class_weight={"fraud": 3.0})
    f = est.fit(X, labels).decision_function(X)
    g = ODMClassifier(kernel="linear", tol=TOL).fit(
        X, labels, sample_weight=np.where(labels == "fraud", 3.0, 1.0)).decision_function(X)
    np.testing.assert_allclose(f, g, rtol=1e-7, atol=1e-9)


def test_balanced_raises_minority_recall():
    """On 1:10 data "balanced" finds more of the minority class than no weights."""
    X, y = make_classification(n_samples=660, n_features=6, weights=[0.91], flip_y=0.05,
                               class_sep=0.6, random_state=4)
    plain = ODMClassifier(kernel="rbf", random_state=0).fit(X, y)
    bal = ODMClassifier(kernel="rbf", random_state=0, class_weight="balanced").fit(X, y)
    recall = [float(np.mean(m.predict(X[y == 1]) == 1)) for m in (plain, bal)]
    assert recall[1] > recall[0]


def test_zero_weight_rows_are_dropped():
    X, y, sw = _data()
    est = ODMClassifier(kernel="rbf", tol=TOL, random_state=0)
    a = clone(est).fit(X, y, sample_weight=(sw > 0).astype(float))
    b = clone(est).fit(X[sw > 0], y[sw > 0])
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-7,
                               atol=1e-9)
    # support_ indexes the rows given, dropped rows never among them
    assert set(a.support_) <= set(np.flatnonzero(sw > 0))
    np.testing.assert_array_equal(a.support_, np.flatnonzero(sw > 0)[b.support_])
    assert a.fit_info_["weights"]["rows_dropped"] == int(np.sum(sw == 0))


@pytest.mark.parametrize("bad, match", [
    ([-1.0], ">= 0"), ([np.nan], "finite"), ([np.inf], "finite"), ("zeros", "zero"),
    ("short", "shape"),
])
def test_bad_sample_weight(bad, match):
    X, y, _ = _data(n=20)
    if bad == "zeros":
        sw = np.zeros(len(y))
    elif bad == "short":
        sw = np.ones(len(y) - 1)
    else:
        sw = np.ones(len(y))
        sw[3] = bad[0]
    with pytest.raises(ValueError, match=match):
        ODMClassifier(kernel="linear").fit(X, y, sample_weight=sw)


@pytest.mark.parametrize("cw", [{0: -1.0}, {0: float("nan")}, "balance", [1.0, 2.0], {0: 0}])
def test_bad_class_weight_param(cw):
    X, y, _ = _data(n=20)
    with pytest.raises(InvalidParameterError, match="class_weight"):
        ODMClassifier(kernel="linear", class_weight=cw).fit(X, y)


def test_class_weight_unknown_label_named():
    X, y, _ = _data(n=20)
    with pytest.raises(InvalidParameterError, match="label 7 is not a class"):
        ODMClassifier(kernel="linear", class_weight={7: 2.0}).fit(X, y)


def test_cv_weights_scores():
    """The auto search's fold score: sample-weighted accuracy, or balanced accuracy when the
    model has a class_weight."""
    from solver.auto.search import CVWeights

    y = np.array([0, 0, 0, 0, 1, 1])
    pred = np.array([0, 0, 0, 0, 0, 1])
    va = np.arange(6)
    assert CVWeights().fold_score(y, pred, va) == pytest.approx(5 / 6)
    w = np.array([1.0, 1, 1, 1, 3, 1])
    assert CVWeights(score=w).fold_score(y, pred, va) == pytest.approx(5 / 8)
    assert CVWeights(balanced=True).fold_score(y, pred, va) == pytest.approx(0.75)
    assert CVWeights(score=w, balanced=True).fold_score(y, pred, va) == \
        pytest.approx(0.5 * (1.0 + 1 / 4))


def test_auto_search_with_class_weight():
    X, y = make_classification(n_samples=300, n_features=5, weights=[0.9], random_state=1)
    m = ODMClassifier(kernel="rbf", lam="auto", class_weight="balanced",
                      random_state=0).fit(X, y)
    auto = m.fit_info_["auto"]
    assert auto["cv_score"] == "balanced_accuracy"
    assert m.lam_ == auto["chosen"]["lam"]
    plain = ODMClassifier(kernel="rbf", lam="auto", random_state=0).fit(X, y)
    assert "cv_score" not in plain.fit_info_["auto"]


def test_class_weight_text_keys():
    """A JSON object's keys are text: "1" names the label 1 (and 1.0)."""
    X, y, _ = _data()
    for labels in (y, y.astype(float)):
        a = ODMClassifier(kernel="linear", tol=TOL, class_weight={"1": 2.5}).fit(X, labels)
        b = ODMClassifier(kernel="linear", tol=TOL, class_weight={1: 2.5}).fit(X, labels)
        np.testing.assert_allclose(a.decision_function(X), b.decision_function(X))


@pytest.mark.parametrize("sparse", [False, True])
def test_weighted_scan_is_weighted_variance(sparse):
    """The stored-rows statistics of a Spark job's search (``solver.core.row_blocks.scan``)
    weight the variance as the fit does (``solver.core.training.weighted_variance``)."""
    from solver.core.row_blocks import blocks_of, scan
    from solver.core.training import weighted_variance

    X, _, _ = _data(n=300)
    X = np.where(np.abs(X) > 1.0, X, 0.0)
    Xm = sp.csr_matrix(X) if sparse else X
    w = np.random.default_rng(5).uniform(0.5, 4.0, size=X.shape[0])
    stats = scan(lambda: blocks_of(Xm, 64), scale=True, weights=w)
    Xs = stats.scaler.transform(Xm)
    assert stats.variance == pytest.approx(weighted_variance(Xs, w), rel=1e-10)
    assert stats.variance != pytest.approx(scan(lambda: blocks_of(Xm, 64)).variance,
                                           rel=1e-6)


def test_balanced_counts_the_rows_fitted():
    """"balanced" with rows of weight 0: the classes are counted without them (weight 0 is
    a row left out), so it equals "balanced" on the rows kept."""
    X, y, sw = _data(n=120)
    est = ODMClassifier(kernel="linear", tol=TOL, class_weight="balanced")
    a = clone(est).fit(X, y, sample_weight=(sw > 0).astype(float))
    b = clone(est).fit(X[sw > 0], y[sw > 0])
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(X), rtol=1e-7,
                               atol=1e-9)
