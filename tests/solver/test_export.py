"""ONNX export (``solver.io.export``): the graph run by onnxruntime gives ``decision_function``
within 1e-5 and the same labels, for linear, RBF and polynomial models, binary and
multi-class, with and without scaling and intercept, sparse-trained, SODM-averaged and
with probabilities."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_classification

from solver import ODMClassifier, SODMClassifier
from solver.io.export import OPSET, to_onnx, to_onnx_bytes

TOL = 1e-5


def run(est, X, **kw):
    sess = ort.InferenceSession(to_onnx_bytes(est, **kw), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {"X": X}), strict=True))


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(360, 7, n_informative=5, n_classes=3, n_clusters_per_class=1,
                               random_state=0)
    X = X * np.array([1, 10, 100, 0.1, 1, 5, 2]) + 3  # features on different scales
    return X, y


@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize(("scale", "fit_intercept"), [(True, True), (False, False)])
def test_matches_decision_function(data, kernel, n_classes, scale, fit_intercept):
    X, y = data
    if n_classes == 2:
        y = np.where(y == 0, "no", "yes")  # string labels come back as strings
    if not scale:  # standardized by hand, so the unscaled solve is well conditioned
        X = (X - X.mean(axis=0)) / X.std(axis=0)
    est = ODMClassifier(kernel=kernel, scale=scale, fit_intercept=fit_intercept,
                        random_state=0).fit(X[:240], y[:240])
    out = run(est, X)
    ref = est.decision_function(X)
    assert out["decision_function"].shape == ref.shape
    np.testing.assert_allclose(out["decision_function"], ref, rtol=0, atol=TOL)
    np.testing.assert_array_equal(out["label"], est.predict(X))
    assert "probabilities" not in out


def test_sodm_sparse_float32_and_probabilities(data):
    X, y = data
    Xb, yb = X[:300], (y[:300] == 1).astype(int)
    est = SODMClassifier(kernel="rbf", p=2, levels=1, probability=True,
                         random_state=0).fit(sp.csr_matrix(Xb), yb)
    assert est.fit_info_["n_iter"]  # a partitioned fit: averaged local duals
    out = run(est, X)
    np.testing.assert_allclose(out["decision_function"], est.decision_function(X), atol=TOL)
    np.testing.assert_allclose(out["probabilities"], est.predict_proba(X), atol=TOL)
    assert out["label"].dtype == np.int64
    X32 = X.astype(np.float32)
    out32 = run(est, X32, input_dtype=np.float32)
    np.testing.assert_allclose(out32["decision_function"],
                               est.decision_function(X32.astype(np.float64)), atol=TOL)


def test_linear_sodm_multiclass_probabilities(data):
    X, y = data
    est = SODMClassifier(kernel="linear", probability=True, random_state=0).fit(X, y)
    out = run(est, X)
    np.testing.assert_allclose(out["decision_function"], est.decision_function(X), atol=TOL)
    np.testing.assert_allclose(out["probabilities"], est.predict_proba(X), atol=TOL)
    np.testing.assert_array_equal(out["label"], est.predict(X))


def test_graph_is_standard_onnx(data):
    X, y = data
    model = to_onnx(ODMClassifier(random_state=0).fit(X, y))
    onnx.checker.check_model(model, full_check=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)]
    assert {n.op_type for n in model.graph.node} <= {
        "Sub", "Mul", "MatMul", "ReduceSum", "Add", "Max", "Exp", "Identity", "ArgMax",
        "Gather"}
    props = {p.key: p.value for p in model.metadata_props}
    assert props["classes"] == "0,1,2" and props["kernel"] == "rbf"


def test_unfitted_is_refused():
    with pytest.raises(ValueError, match="fitted"):
        to_onnx(ODMClassifier())
