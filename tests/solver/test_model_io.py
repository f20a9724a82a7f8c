"""Model files: exact round trips for every model kind, the header, and malformed files."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs

from solver import ODMClassifier, SODMClassifier
from solver.estimators import DCODMClassifier, SVRGODMClassifier
from solver.io.model_io import FORMAT, FORMAT_VERSION, dumps, load_model, loads, save_model


@pytest.fixture(scope="module")
def data():
    X, y = make_blobs(n_samples=90, centers=[[0, 0, 0], [2, 2, 0], [0, 2, 2]], cluster_std=1.0,
                      random_state=4)
    X_test, _ = make_blobs(n_samples=40, centers=[[0, 0, 0], [2, 2, 0], [0, 2, 2]],
                           random_state=5)
    return X, y, X_test


def _binary(y):
    return np.where(y == 0, "neg", "pos")


CASES = {
    "linear": lambda X, y: ODMClassifier(kernel="linear", random_state=0).fit(X, _binary(y)),
    "rbf": lambda X, y: ODMClassifier(kernel="rbf", random_state=0).fit(X, _binary(y)),
    "poly": lambda X, y: ODMClassifier(kernel="poly", degree=2, coef0=0.5, gamma=0.7,
                                       random_state=0).fit(X, (y % 2) * 1.5 + 0.25),
    "rbf-no-intercept-no-scale": lambda X, y: ODMClassifier(
        kernel="rbf", fit_intercept=False, scale=False, random_state=0).fit(X, y % 2),
    "sparse-rbf": lambda X, y: ODMClassifier(kernel="rbf", random_state=0).fit(
        sp.csr_matrix(np.abs(X)), y % 2),
    "ovr-rbf": lambda X, y: ODMClassifier(kernel="rbf", random_state=0).fit(X, y + 10),
    "ovr-linear": lambda X, y: ODMClassifier(kernel="linear", random_state=0).fit(X, y),
    "sodm-rbf": lambda X, y: SODMClassifier(kernel="rbf", p=2, levels=1,
                                            random_state=0).fit(X, y % 2),
    "sodm-linear": lambda X, y: SODMClassifier(kernel="linear", random_state=0).fit(X, y % 2),
    "baseline-dc": lambda X, y: DCODMClassifier(levels=1, random_state=0).fit(X, y % 2),
    "baseline-svrg": lambda X, y: SVRGODMClassifier(random_state=0).fit(X, y),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip_gives_identical_decisions(data, case, tmp_path):
    X, y, X_test = data
    est = CASES[case](X, y)
    Xq = sp.csr_matrix(np.abs(X_test)) if case.startswith("sparse") else X_test
    path = tmp_path / "m.sodm"
    save_model(est, path)
    loaded = load_model(path)
    assert type(loaded) is type(est)
    assert np.array_equal(loaded.decision_function(Xq), est.decision_function(Xq))
    assert np.array_equal(loaded.predict(Xq), est.predict(Xq))
    assert np.array_equal(loaded.classes_, est.classes_)
    assert loaded.get_params() == {k: v for k, v in est.get_params().items()}
    assert loaded.history_ == est.history_
    assert np.array_equal(loaded.n_support_, est.n_support_)
    if est.w_ is None:
        assert sp.issparse(loaded.support_vectors_) == sp.issparse(est.support_vectors_)
    # bytes and file objects work too, and saving is deterministic
    assert dumps(loaded) == dumps(est) == path.read_bytes()
    buf = io.BytesIO()
    save_model(est, buf)
    buf.seek(0)
    assert np.array_equal(load_model(buf).decision_function(Xq), est.decision_function(Xq))


def test_header_and_arrays_are_portable(data):
    X, y, _ = data
    est = ODMClassifier(kernel="rbf", random_state=3).fit(X, _binary(y))
    blob = dumps(est)
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        names = set(zf.namelist())
        header = json.loads(zf.read("header.json"))
        for name in names - {"header.json"}:
            assert name.endswith(".npy")
            arr = np.load(io.BytesIO(zf.read(name)), allow_pickle=False)
            assert arr.dtype.kind in "fiuUb"
    assert header["format"] == FORMAT and header["format_version"] == FORMAT_VERSION
    assert header["formulation"] == "sodm-ijcai23"
    assert "lam/(2M)" in header["convention"]
    assert header["estimator"] == "ODMClassifier"
    assert header["kernel"] == {"name": "rbf", "gamma": est.gamma_, "degree": 3, "coef0": 1.0}
    assert header["params"]["gamma"] == "scale" and header["params"]["random_state"] == 3
    assert header["scaler"]["kind"] == "minmax"
    assert header["classes"] == ["neg", "pos"]
    assert header["fit_intercept"] is True and header["model_type"] == "kernel"
    training = header["training"]
    assert training["algorithm"] == "odm-dcd-kernel"
    assert training["n_train"] == len(X) and training["seconds"] > 0
    assert training["history"] == est.history_
    assert {"support_vectors.npy", "dual_coef.npy", "scaler_min.npy", "classes.npy"} <= names


def _rewrite(blob: bytes, *, header=None, drop=(), replace=None) -> bytes:
    """Copy a model archive, editing the header / dropping or replacing members."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(blob)) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            if name in drop:
                continue
            payload = src.read(name)
            if name == "header.json" and header is not None:
                h = json.loads(payload)
                header(h)
                payload = json.dumps(h).encode()
            if replace and name in replace:
                payload = replace[name]
            dst.writestr(name, payload)
    return out.getvalue()


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=True)
    return buf.getvalue()


@pytest.fixture(scope="module")
def good_blob(data):
    X, y, _ = data
    return dumps(ODMClassifier(kernel="rbf", random_state=0).fit(X, y % 2))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b"not a zip at all", "zip"),
        (lambda b: b[: len(b) // 2], "zip"),
        (lambda b: _rewrite(b, drop={"header.json"}), "header.json"),
        (lambda b: _rewrite(b, replace={"header.json": b"{oops"}), "JSON"),
        (lambda b: _rewrite(b, header=lambda h: h.update(format="other")), "format"),
        (lambda b: _rewrite(b, header=lambda h: h.update(format_version=2)), "version"),
        (lambda b: _rewrite(b, header=lambda h: h.update(formulation="x")), "formulation"),
        (lambda b: _rewrite(b, header=lambda h: h.update(estimator="SVC")), "estimator"),
        (lambda b: _rewrite(b, header=lambda h: h["params"].update(evil=1)), "evil"),
        (lambda b: _rewrite(b, header=lambda h: h["params"].update(lam=-1)), "lam"),
        (lambda b: _rewrite(b, header=lambda h: h.pop("kernel")), "kernel"),
        (lambda b: _rewrite(b, drop={"dual_coef.npy"}), "dual_coef"),
        (lambda b: _rewrite(b, replace={"dual_coef.npy": _npy(np.zeros((1, 2)))}), "dual_coef"),
        (lambda b: _rewrite(b, replace={"dual_coef.npy": b"garbage"}), "dual_coef"),
        (lambda b: _rewrite(b, replace={"dual_coef.npy": _npy(np.array([{"a": 1}]))}),
         "dual_coef"),
        (lambda b: _rewrite(b, header=lambda h: h.update(model_type="tree")), "model_type"),
        (lambda b: _rewrite(b, replace={"dual_coef.npy": _npy(np.zeros((1, 10**6)))}),
         "larger than its manifest"),
        (lambda b: _rewrite(b, header=lambda h: h["arrays"]["dual_coef"].update(dtype="?x")),
         "dual_coef"),
        (lambda b: _rewrite(b, header=lambda h: h["arrays"].pop("w", None)
                            or h["arrays"].pop("dual_coef")), "manifest"),
    ],
)
def test_malformed_files_raise_value_error(good_blob, mutate, message):
    with pytest.raises(ValueError, match=message):
        loads(mutate(good_blob))


def test_unfitted_estimator_cannot_be_saved():
    with pytest.raises(ValueError, match="fitted"):
        dumps(ODMClassifier())
