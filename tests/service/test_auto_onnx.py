"""Automatic hyperparameters, probabilities and ONNX export through the real stack (uvicorn,
Postgres, Redis, a Celery worker): a request without lam/gamma/theta searches them and the
model records the search; ``probability`` gives calibrated probabilities in /predict and
their calibration error in the metrics; ``GET /models/{id}/onnx`` runs in onnxruntime and
gives /predict's answers."""

from __future__ import annotations

import io

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from solver import SODMClassifier
from solver.io.model_io import load_model
from tests.service.jobs_helpers import load_libsvm, submit, upload_as, wait_job
from worker.runner import split

SEED = 3


@pytest.fixture(scope="module")
def heart(api_server, tenant, datasets_dir):
    return upload_as(api_server, tenant, datasets_dir, "heart_scale")


@pytest.fixture(scope="module")
def models(api_server, tenant, heart, worker):
    """Two jobs on heart_scale: defaults only (auto) and fixed values with probabilities."""
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        jobs = {
            "auto": submit(c, {"dataset_id": heart["id"], "test_fraction": 0.2,
                               "seed": SEED, "name": "heart-auto"}),
            "proba": submit(c, {"dataset_id": heart["id"], "test_fraction": 0.2,
                                "seed": SEED, "name": "heart-proba",
                                "params": {"kernel": "rbf", "lam": 100.0, "gamma": "scale",
                                           "theta": 0.5, "probability": True}}),
        }
        out = {}
        for name, job in jobs.items():
            done = wait_job(c, job["id"])
            assert done["state"] == "SUCCEEDED", done["error"]
            out[name] = (done, c.get(f"/models/{done['model_id']}").json())
        return out


def onnx_outputs(client: httpx.Client, model_id: str, X: np.ndarray) -> dict[str, np.ndarray]:
    r = client.get(f"/models/{model_id}/onnx")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    assert ".onnx" in r.headers["content-disposition"]
    sess = ort.InferenceSession(r.content, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {"X": X}), strict=True))


def test_omitted_parameters_are_searched(client, models, datasets_dir):
    job, model = models["auto"]
    assert {k: job["params"][k] for k in ("lam", "gamma", "theta")} == {
        "lam": "auto", "gamma": "auto", "theta": "auto"}
    info = model["fit_info"]
    auto = info["auto"]
    chosen = auto["chosen"]
    # the model's parameters are the chosen values; the search is on record
    assert {k: model["params"][k] for k in chosen} == chosen == info["params"]
    # heart_scale: one rung, the 35 (lam, gamma) at theta 0.5, then 12 of them at 0.2 and 0.8
    assert len(auto["cv_table"]) > 35 + 24 and auto["rows"] > 0
    assert 0 < auto["cpu_seconds"] <= auto["budget_allowed_cpu_seconds"]
    # (the process tree's clock counts 10 ms ticks: a fit on 216 rows may read 0)
    assert auto["final_fit_cpu_seconds"] >= 0 and auto["within_budget"] is True

    # the library, on the rows the service trained on, reaches the same model
    X, y = load_libsvm(datasets_dir, "heart_scale")
    tr, _ = split(X, y, 0.2, SEED)
    lib = SODMClassifier(lam="auto", gamma="auto", theta="auto",
                         random_state=SEED).fit(X[tr], y[tr])
    assert lib.fit_info_["auto"]["chosen"] == chosen
    out = client.post("/predict", json={"model_id": model["id"], "instances": X.tolist()})
    assert out.status_code == 200, out.text
    np.testing.assert_allclose(out.json()["decision_values"], lib.decision_function(X),
                               rtol=1e-9, atol=1e-9)
    assert out.json()["probabilities"] is None
    # the model file carries the same record
    offline = load_model(io.BytesIO(client.get(f"/models/{model['id']}/file").content))
    assert offline.fit_info_["auto"]["cv_table"] == auto["cv_table"]


def test_probabilities_and_their_calibration(client, models, datasets_dir):
    _, model = models["proba"]
    assert "auto" not in model["fit_info"]  # every searched parameter was given
    cal = model["metrics"]["calibration"]
    assert cal["method"] == "platt" and cal["n"] == model["metrics"]["n_test"]
    assert 0 <= cal["ece"] < 0.5 and 0 <= cal["brier"] < 0.25
    assert model["fit_info"]["calibration"]["folds"] == 3
    X, _ = load_libsvm(datasets_dir, "heart_scale")
    r = client.post("/predict", json={"model_id": model["id"], "instances": X[:20].tolist()})
    assert r.status_code == 200, r.text
    P = np.asarray(r.json()["probabilities"])
    assert P.shape == (20, 2)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    offline = load_model(io.BytesIO(client.get(f"/models/{model['id']}/file").content))
    np.testing.assert_allclose(P, offline.predict_proba(X[:20]), rtol=1e-12, atol=1e-12)
    # the reported ECE is that of the held-out rows' probabilities (10 equal-width bins of
    # the top probability), recomputed here from /predict
    y = load_libsvm(datasets_dir, "heart_scale")[1]
    _, te = split(X, y, 0.2, SEED)
    Pt = np.asarray(client.post("/predict", json={"model_id": model["id"],
                                                  "instances": X[te].tolist()}
                                ).json()["probabilities"])
    conf = Pt.max(axis=1)
    hit = np.asarray(model["classes"])[Pt.argmax(axis=1)] == y[te]
    which = np.minimum((conf * 10).astype(int), 9)
    ece = sum(np.mean(which == b) * abs(hit[which == b].mean() - conf[which == b].mean())
              for b in range(10) if np.any(which == b))
    assert cal["ece"] == pytest.approx(ece, abs=1e-9)
    # the more likely class is the predicted label wherever they are far from 1/2
    sure = np.abs(P[:, 1] - 0.5) > 0.1
    labels = np.asarray(r.json()["labels"])
    assert np.array_equal(labels[sure], np.where(P[sure, 1] > 0.5, 1, -1))


def test_onnx_export_matches_predict(client, models, datasets_dir):
    X, _ = load_libsvm(datasets_dir, "heart_scale")
    for name in ("auto", "proba"):
        _, model = models[name]
        got = onnx_outputs(client, model["id"], X)
        ref = client.post("/predict", json={"model_id": model["id"],
                                            "instances": X.tolist()}).json()
        np.testing.assert_allclose(got["decision_function"], ref["decision_values"],
                                   rtol=0, atol=1e-5)
        assert got["label"].tolist() == ref["labels"]
        if name == "proba":
            np.testing.assert_allclose(got["probabilities"], ref["probabilities"], atol=1e-5)


def test_onnx_multiclass_text_labels(client, worker):
    """Three classes with text labels, polynomial kernel, via a CSV upload."""
    rng = np.random.default_rng(0)
    centers = np.array([[0, 0, 0], [3, 0, 1], [0, 3, 2]])
    y = rng.integers(0, 3, 150)
    X = centers[y] + rng.normal(size=(150, 3))
    names = np.array(["ash", "elm", "oak"])[y]
    lines = ["a,b,c,label"] + [",".join(f"{v:.6g}" for v in X[i]) + f",{names[i]}"
                               for i in range(150)]
    r = client.post("/datasets", files={"file": ("trees.csv", "\n".join(lines).encode())},
                    data={"name": "trees"})
    assert r.status_code == 201, r.text
    job = submit(client, {"dataset_id": r.json()["id"], "algorithm": "odm",
                          "params": {"kernel": "poly", "degree": 2, "lam": 10.0,
                                     "gamma": "scale", "theta": 0.3}, "seed": 1})
    done = wait_job(client, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    Xq = np.round(X, 5)
    got = onnx_outputs(client, done["model_id"], Xq)
    ref = client.post("/predict", json={"model_id": done["model_id"],
                                        "instances": Xq.tolist()}).json()
    assert got["decision_function"].shape == (150, 3)
    np.testing.assert_allclose(got["decision_function"], ref["decision_values"], atol=1e-5)
    assert got["label"].tolist() == ref["labels"] and set(ref["labels"]) == set(names)


def _problem(r: httpx.Response) -> dict:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return r.json()


def test_auto_where_it_cannot_run_is_422(client, heart):
    base = {"dataset_id": heart["id"], "algorithm": "sodm"}
    p = _problem(client.post("/train", json={**base, "params": {"theta": "auto"},
                                             "search": {"grid": {"lam": [1.0, 10.0]}}}))
    assert p["errors"][0]["field"] == "params.theta"
    p = _problem(client.post("/train", json={**base, "search": {"grid": {"lam": ["auto"]}}}))
    assert p["errors"][0]["field"] == "search.grid.lam"
    p = _problem(client.post("/train", json={**base, "params": {"gamma": "widest"}}))
    assert p["errors"][0]["field"] == "params.gamma"


def test_given_values_are_kept_and_linear_has_no_gamma(client, heart):
    r = client.post("/train", json={"dataset_id": heart["id"], "params": {"lam": 10.0},
                                    "test_fraction": 0.2})
    assert r.status_code == 202, r.text
    assert {k: r.json()["params"][k] for k in ("lam", "gamma", "theta")} == {
        "lam": 10.0, "gamma": "auto", "theta": "auto"}
    r = client.post("/train", json={"dataset_id": heart["id"], "algorithm": "odm",
                                    "params": {"kernel": "linear"}, "test_fraction": 0.2})
    assert r.status_code == 202, r.text
    assert "gamma" not in r.json()["params"] and r.json()["params"]["lam"] == "auto"
    with_grid = client.post("/train", json={"dataset_id": heart["id"],
                                            "search": {"grid": {"lam": [1.0, 10.0]}}})
    assert with_grid.status_code == 202, with_grid.text
    assert with_grid.json()["params"] == {}  # a grid search keeps the fixed defaults


def test_onnx_of_unknown_model_is_404(client):
    r = client.get("/models/00000000-0000-0000-0000-000000000000/onnx")
    assert r.status_code == 404 and r.headers["content-type"].startswith(
        "application/problem+json")
