"""End to end on the real stack (uvicorn + Postgres + Redis + a celery worker process):
upload svmguide1 / svmguide1.t, train SODM, predict the test file, and check the service
gives exactly the library's own fit (same parameters, same seed -> identical decisions)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from solver import SODMClassifier
from solver.io.model_io import load_model
from tests.service.jobs_helpers import load_libsvm, submit, upload_as, wait_job

PARAMS = {"kernel": "rbf", "lam": 10000.0, "gamma": "scale", "theta": 0.2, "upsilon": 0.5}
SEED = 5


@pytest.fixture(scope="module")
def svmguide(api_server, tenant, datasets_dir):
    """The two uploaded datasets (train, test)."""
    return (upload_as(api_server, tenant, datasets_dir, "svmguide1"),
            upload_as(api_server, tenant, datasets_dir, "svmguide1.t"))


def test_sodm_job_matches_library_fit(client, worker, svmguide, datasets_dir):
    train, test = svmguide
    job = submit(client, {"dataset_id": train["id"], "algorithm": "sodm", "params": PARAMS,
                          "test_dataset_id": test["id"], "seed": SEED, "name": "guide"})
    assert job["state"] == "QUEUED" and job["attempt"] == 0
    done = wait_job(client, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["attempt"] == 1 and done["progress"]["fraction"] == 1.0
    assert done["history"], "the solver's per-level history is exposed"
    model = client.get(f"/models/{done['model_id']}").json()
    assert model["name"] == "guide" and model["job_id"] == job["id"]
    assert model["dataset_id"] == train["id"] and model["n_features"] == 4
    assert model["classes"] == [0, 1]
    assert model["n_support_vectors"] > 0 and model["train_seconds"] > 0

    # The library's own fit with the same parameters and seed.
    X, y = load_libsvm(datasets_dir, "svmguide1")
    Xt, yt = load_libsvm(datasets_dir, "svmguide1.t", n_features=4)
    lib = SODMClassifier(**PARAMS, random_state=SEED).fit(X, y)
    lib_f = lib.decision_function(Xt)
    lib_acc = float(np.mean(lib.predict(Xt) == yt))

    r = client.post("/predict", json={"model_id": model["id"], "instances": Xt.tolist()})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["model_id"] == model["id"]
    np.testing.assert_allclose(out["decision_values"], lib_f, rtol=1e-9, atol=1e-9)
    acc = float(np.mean(np.asarray(out["labels"]) == yt))
    assert acc == lib_acc and acc > 0.9
    assert model["metrics"]["accuracy"] == pytest.approx(lib_acc, abs=1e-12)
    m = model["metrics"]
    assert m["n_test"] == 4000 and 0.9 < m["roc_auc"] <= 1.0
    assert set(m) >= {"precision", "recall", "f1", "confusion_matrix"}
    cm = m["confusion_matrix"]
    assert cm["labels"] == [0, 1] and int(np.sum(cm["matrix"])) == 4000
    assert np.trace(cm["matrix"]) == round(lib_acc * 4000)
    margin = model["margin"]
    assert margin["n"] == 4000 and sum(margin["histogram"]["counts"]) == 4000

    # The downloadable file is the portable model: same decisions offline.
    f = client.get(f"/models/{model['id']}/file")
    assert f.status_code == 200
    assert f.headers["content-type"] == "application/octet-stream"
    assert "attachment" in f.headers["content-disposition"]
    offline = load_model(io.BytesIO(f.content))
    np.testing.assert_allclose(offline.decision_function(Xt), lib_f, rtol=1e-9, atol=1e-9)
    # a resumed download gets the rest; a Range it cannot serve is a problem like any error
    size = len(f.content)
    part = client.get(f"/models/{model['id']}/file", headers={"Range": "bytes=10-"})
    assert part.status_code == 206 and part.content == f.content[10:]
    past = client.get(f"/models/{model['id']}/file", headers={"Range": f"bytes={size}-"})
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{size}"
    assert past.headers["content-type"] == "application/problem+json"
    assert past.json()["type"].endswith("/range-not-satisfiable")
    bad = client.get(f"/models/{model['id']}/file", headers={"Range": "bytes=9-2"})
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/problem+json"
    assert "bytes=9-2" in bad.json()["detail"]


def test_models_by_name_get_versions(client, worker, svmguide):
    train, _ = svmguide
    body = {"dataset_id": train["id"], "algorithm": "odm", "params": {"kernel": "linear"},
            "test_fraction": 0.25, "seed": 1, "name": "guide-lin"}
    ids = []
    for _ in range(2):
        done = wait_job(client, submit(client, body)["id"])
        assert done["state"] == "SUCCEEDED", done["error"]
        ids.append(done["model_id"])
    listed = client.get("/models", params={"name": "guide-lin"}).json()["items"]
    assert sorted(m["version"] for m in listed) == [1, 2]
    by_version = {m["version"]: m["id"] for m in listed}
    assert by_version == {1: ids[0], 2: ids[1]}
    # held-out part of a stratified 25 % split
    assert listed[0]["metrics"]["n_test"] == int(np.ceil(0.25 * 3089))
    row = [[26.173, 58.867, -0.1894697, 125.1225]]
    latest = client.post("/predict", json={"model": "guide-lin", "instances": row}).json()
    assert latest["model_id"] == ids[1]
    first = client.post("/predict", json={"model": "guide-lin@1", "instances": row}).json()
    assert first["model_id"] == ids[0]
    # delete: gone from listings, predict by id 404, name resolves to the remaining version
    assert client.delete(f"/models/{ids[1]}").status_code == 204
    assert client.get(f"/models/{ids[1]}").status_code == 404
    r = client.post("/predict", json={"model_id": ids[1], "instances": row})
    assert r.status_code == 404 and r.headers["content-type"].startswith(
        "application/problem+json")
    again = client.post("/predict", json={"model": "guide-lin", "instances": row}).json()
    assert again["model_id"] == ids[0]


def test_text_labels_come_back_as_text(client, worker, datasets_dir):
    """A CSV with string labels: the model keeps them, /predict answers in them, and the
    labels follow the sign of the decision values (second class positive)."""
    X, y = load_libsvm(datasets_dir, "svmguide1")
    idx = np.random.default_rng(0).choice(len(y), 400, replace=False)
    names = np.where(y[idx] == 1, "pos", "neg")
    lines = ["f0,f1,f2,f3,label"] + [",".join(f"{v:.6g}" for v in X[i]) + f",{n}"
                                     for i, n in zip(idx, names, strict=True)]
    r = client.post("/datasets", files={"file": ("guide.csv", "\n".join(lines).encode())},
                    data={"name": "guide-text"})
    assert r.status_code == 201, r.text
    assert r.json()["classes"] == {"neg": int((names == "neg").sum()),
                                   "pos": int((names == "pos").sum())}
    job = submit(client, {"dataset_id": r.json()["id"], "algorithm": "sodm",
                          "params": {"kernel": "linear"}, "test_fraction": 0.25, "seed": 1})
    done = wait_job(client, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    assert client.get(f"/models/{done['model_id']}").json()["classes"] == ["neg", "pos"]
    out = client.post("/predict", json={"model_id": done["model_id"],
                                        "instances": X[idx[:50]].tolist()}).json()
    assert out["labels"] == ["pos" if f > 0 else "neg" for f in out["decision_values"]]
    agree = np.mean(np.asarray(out["labels"]) == names[:50])
    assert agree > 0.8, agree  # a linear ODM on svmguide1 is right on ~95 % of rows
