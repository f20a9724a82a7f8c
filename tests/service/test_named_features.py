"""Named features on the real stack: a model trained on CSV or Parquet lists its columns, and
/predict takes instances as objects keyed by them (missing or unknown names: a 422 naming
them); digit keys stay 0-based sparse indices; LIBSVM models have no names."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.service.jobs_helpers import HEART_NAMES, load_libsvm, train_model, upload_as

NAMES = HEART_NAMES


def _train(c: httpx.Client, dataset_id: str, name: str) -> dict:
    return train_model(c, {"dataset_id": dataset_id, "algorithm": "odm", "name": name,
                           "params": {"kernel": "rbf"}, "seed": 4})


@pytest.fixture(scope="module")
def heart(datasets_dir):
    return load_libsvm(datasets_dir, "heart_scale", n_features=13)


@pytest.fixture(scope="module")
def models(api_server, tenant, datasets_dir, worker, heart):
    X, y = heart
    lines = [",".join([str(int(label)), *(repr(float(v)) for v in row)])
             for row, label in zip(X, y, strict=True)]
    csv = ",".join(["label", *NAMES]) + "\n" + "\n".join(lines)
    buf = io.BytesIO()
    pq.write_table(pa.table({"label": y, **{n: X[:, j] for j, n in enumerate(NAMES)}}), buf)
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        out = {}
        for fmt, name, payload in (("csv", "heart.csv", csv.encode()),
                                   ("parquet", "heart.parquet", buf.getvalue())):
            r = c.post("/datasets", files={"file": (name, payload)},
                       data={"format": fmt, "label_column": "label"})
            assert r.status_code == 201, r.text
            out[fmt] = _train(c, r.json()["id"], f"named-{fmt}")
        libsvm = upload_as(api_server, tenant, datasets_dir, "heart_scale")
        out["libsvm"] = _train(c, libsvm["id"], "named-libsvm")
    return out


def _predict(c: httpx.Client, model_id: str, rows: list) -> httpx.Response:
    return c.post("/predict", json={"model_id": model_id, "instances": rows})


def test_models_list_their_feature_names(client, models):
    assert models["csv"]["feature_names"] == NAMES
    assert models["parquet"]["feature_names"] == NAMES
    assert models["libsvm"]["feature_names"] is None


def test_predict_by_name_equals_predict_by_position(client, models, heart):
    X, _ = heart
    rows = X[:20]
    for fmt in ("csv", "parquet"):
        mid = models[fmt]["id"]
        dense = _predict(client, mid, rows.tolist())
        assert dense.status_code == 200, dense.text
        named = [{n: float(row[j]) for j, n in reversed(list(enumerate(NAMES)))}
                 for row in rows]  # key order does not matter
        by_name = _predict(client, mid, named)
        assert by_name.status_code == 200, by_name.text
        assert by_name.json()["labels"] == dense.json()["labels"]
        np.testing.assert_allclose(by_name.json()["decision_values"],
                                   dense.json()["decision_values"], rtol=1e-12)
        # digit keys are still 0-based sparse indices
        sparse = [{str(j): float(v) for j, v in enumerate(row) if v} for row in rows]
        assert _predict(client, mid, sparse).json()["labels"] == dense.json()["labels"]


def test_missing_and_unknown_names_are_named(client, models, heart):
    X, _ = heart
    mid = models["csv"]["id"]
    full = {n: float(X[0, j]) for j, n in enumerate(NAMES)}
    ok = _predict(client, mid, [full]).json()["labels"]
    missing = {k: v for k, v in full.items() if k not in ("chol", "thal")}
    r = _predict(client, mid, [full, missing])
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["missing"] == ["chol", "thal"] and body["unknown"] == []
    assert "instances[1]" in body["detail"] and "chol" in body["detail"]
    assert body["errors"][0]["field"] == "instances[1]"
    r = _predict(client, mid, [{**full, "cholesterol": 1.0, "bmi": 2.0}])
    assert r.status_code == 422 and r.json()["unknown"] == ["cholesterol", "bmi"]
    r = _predict(client, mid, [{**full, "age": "old"}])
    assert r.status_code == 422 and "instances[0]['age']" in r.json()["detail"]
    assert _predict(client, mid, [full]).json()["labels"] == ok
    # a model without names refuses named rows, naming the key
    r = _predict(client, models["libsvm"]["id"], [full])
    assert r.status_code == 422 and "not a 0-based feature index" in r.json()["detail"]
