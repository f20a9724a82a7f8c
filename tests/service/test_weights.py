"""Class and sample weights through the real stack: ``POST /train`` with ``weight_column`` (a
CSV / Parquet column taken out of the features) gives the model of the rows repeated by their
weights; ``class_weight`` ("balanced" or per label) reaches the fit; held-out metrics have
balanced accuracy and per-class recall; bad weights are 422s naming the field and value."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.service.jobs_helpers import HEART_NAMES, load_libsvm, train_model, upload_as

PARAMS = {"kernel": "linear", "lam": 100.0, "theta": 0.2, "tol": 1e-9}


def _csv(X: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> bytes:
    head = ["label", *HEART_NAMES[:3], *(["w"] if w is not None else []), *HEART_NAMES[3:]]
    lines = [",".join(head)]
    for i, (row, label) in enumerate(zip(X, y, strict=True)):
        cells = [str(int(label)), *(repr(float(v)) for v in row[:3])]
        if w is not None:
            cells.append(repr(float(w[i])))
        cells += [repr(float(v)) for v in row[3:]]
        lines.append(",".join(cells))
    return ("\n".join(lines) + "\n").encode()


def _upload(c: httpx.Client, name: str, payload: bytes, fmt: str = "csv") -> str:
    r = c.post("/datasets", files={"file": (name, payload)},
               data={"format": fmt, "label_column": "label"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.fixture(scope="module")
def heart(datasets_dir):
    return load_libsvm(datasets_dir, "heart_scale", n_features=13)


@pytest.fixture(scope="module")
def data(api_server, tenant, datasets_dir, worker, heart):
    """Datasets: heart with a weight column "w" (CSV and Parquet), its rows repeated by the
    weights, a test set, bad weight columns, and the LIBSVM original."""
    X, y = heart
    w = np.random.default_rng(0).integers(0, 4, size=len(y)).astype(float)
    buf = io.BytesIO()
    pq.write_table(pa.table({"label": y, "w": w,
                             **{n: X[:, j] for j, n in enumerate(HEART_NAMES)}}), buf)
    neg, zero = w.copy(), np.zeros_like(w)
    neg[5] = -1.0
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        ids = {
            "weighted": _upload(c, "w.csv", _csv(X, y, w)),
            "parquet": _upload(c, "w.parquet", buf.getvalue(), "parquet"),
            "repeated": _upload(c, "rep.csv", _csv(np.repeat(X, w.astype(int), axis=0),
                                                   np.repeat(y, w.astype(int)))),
            "test": _upload(c, "test.csv", _csv(X[:60], y[:60], np.ones(60))),
            "wtest": _upload(c, "wtest.csv", _csv(X[:60], y[:60], w[:60])),
            "negative": _upload(c, "neg.csv", _csv(X, y, neg)),
            "zero": _upload(c, "zero.csv", _csv(X, y, zero)),
        }
    ids["libsvm"] = upload_as(api_server, tenant, datasets_dir, "heart_scale")["id"]
    return ids


def _decisions(c: httpx.Client, model_id: str, rows: np.ndarray) -> np.ndarray:
    r = c.post("/predict", json={"model_id": model_id, "instances": rows.tolist()})
    assert r.status_code == 200, r.text
    return np.asarray(r.json()["decision_values"], dtype=float)


def test_weight_column_is_no_feature(client, data, heart):
    """CSV and Parquet: the weight column leaves the features (the model has the 13 heart
    columns, in order, and takes rows without it); rows of weight 0 are left out."""
    X, _ = heart
    body = {"algorithm": "odm", "params": PARAMS, "seed": 1, "weight_column": "w"}
    weighted = train_model(client, {**body, "dataset_id": data["weighted"],
                                     "name": "w-split"})
    parquet = train_model(client, {**body, "dataset_id": data["parquet"], "name": "w-pq"})
    for m in (weighted, parquet):
        assert m["n_features"] == 13 and m["feature_names"] == HEART_NAMES
        # rows of weight 0 are left out of the 216 training rows of the split
        assert m["fit_info"]["n_train"] < 216
    np.testing.assert_allclose(_decisions(client, parquet["id"], X[:40]),
                               _decisions(client, weighted["id"], X[:40]), rtol=1e-9,
                               atol=1e-12)
    job = client.get(f"/jobs/{weighted['job_id']}").json()
    assert job["request"]["weight_column"] == "w"


def test_weight_column_equals_repeated_rows_exactly(client, data, heart):
    """Train on all rows of both (test rows from the test set): the same linear ODM. The
    held-out metrics count rows once, and ``metrics.weighted`` by the test set's weights."""
    X, y = heart
    body = {"algorithm": "odm", "params": PARAMS, "seed": 1, "test_dataset_id": data["wtest"]}
    weighted = train_model(client, {**body, "dataset_id": data["weighted"],
                                     "weight_column": "w", "name": "w-exact"})
    repeated = train_model(client, {**body, "dataset_id": data["repeated"],
                                    "test_dataset_id": data["libsvm"], "name": "rep-exact"})
    np.testing.assert_allclose(_decisions(client, weighted["id"], X),
                               _decisions(client, repeated["id"], X), rtol=1e-6, atol=1e-8)
    w = np.random.default_rng(0).integers(0, 4, size=len(y)).astype(float)[:60]
    hit = (np.where(_decisions(client, weighted["id"], X[:60]) > 0, 1, -1) == y[:60])
    metrics = weighted["metrics"]
    assert metrics["n_test"] == 60 and metrics["accuracy"] == pytest.approx(hit.mean())
    scores = metrics["weighted"]
    assert scores["weight_sum"] == pytest.approx(w.sum())
    assert scores["n_weighted"] == np.count_nonzero(w)
    assert scores["accuracy"] == pytest.approx(np.average(hit, weights=w))
    assert scores["accuracy"] != pytest.approx(hit.mean())  # the weights change it
    assert set(scores) >= {"balanced_accuracy", "precision", "recall", "f1", "roc_auc"}
    assert "weighted" not in repeated["metrics"]  # no weight column: no weighted block


def test_class_weight_and_metrics(client, data, heart):
    X, y = heart
    plain = train_model(client, {"dataset_id": data["libsvm"], "algorithm": "odm",
                                 "params": PARAMS, "seed": 2, "name": "cw-plain"})
    balanced = train_model(client, {"dataset_id": data["libsvm"], "algorithm": "odm",
                                    "params": PARAMS, "seed": 2, "name": "cw-bal",
                                    "class_weight": {"1": 5.0}})
    for m in (plain, balanced):
        metrics = m["metrics"]
        recalls = metrics["recall_per_class"]
        assert [r["label"] for r in recalls] == [-1, 1]
        assert sum(r["support"] for r in recalls) == metrics["n_test"]
        assert metrics["balanced_accuracy"] == pytest.approx(
            np.mean([r["recall"] for r in recalls]))
    assert balanced["fit_info"]["weights"]["class_weight"] == {"1": 5.0}
    # weighting class 1 five times finds more of it on the training rows
    pos = X[y == 1]
    share = [float(np.mean(_decisions(client, m["id"], pos) > 0)) for m in (plain, balanced)]
    assert share[1] > share[0]
    sodm = train_model(client, {"dataset_id": data["libsvm"], "algorithm": "sodm",
                                "params": {"kernel": "linear"}, "class_weight": "balanced",
                                "name": "cw-sodm"})
    assert sodm["fit_info"]["weights"]["class_weight"] == "balanced"


def _problem(client: httpx.Client, body: dict) -> dict:
    r = client.post("/train", json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return r.json()


def test_bad_weights_are_422(client, data):
    base = {"algorithm": "odm", "params": PARAMS}
    p = _problem(client, {**base, "dataset_id": data["libsvm"], "class_weight": {"7": 2.0}})
    assert p["errors"][0]["field"] == "class_weight" and p["errors"][0]["value"] == "7"
    assert "'7'" in p["detail"] and "'-1', '1'" in p["detail"]
    for bad in ({"1": -1.0}, {"1": 0}, "balance", [1, 2]):
        p = _problem(client, {**base, "dataset_id": data["libsvm"], "class_weight": bad})
        assert "class_weight" in str(p["errors"])
    p = _problem(client, {**base, "dataset_id": data["weighted"], "weight_column": "nope"})
    assert p["errors"][0] == {"field": "weight_column", "value": "nope",
                              "message": p["detail"]}
    p = _problem(client, {**base, "dataset_id": data["libsvm"], "weight_column": "w"})
    assert "CSV or Parquet" in p["detail"]
    p = _problem(client, {**base, "dataset_id": data["negative"], "weight_column": "w"})
    assert "-1.0 in row 5" in p["detail"]
    p = _problem(client, {**base, "dataset_id": data["zero"], "weight_column": "w"})
    assert "zero" in p["detail"]
    p = _problem(client, {**base, "dataset_id": data["weighted"], "weight_column": "w",
                          "test_dataset_id": data["libsvm"]})
    assert p["errors"][0]["field"] == "test_dataset_id"


@pytest.mark.parametrize("shape, density", [((300, 6), 1.0), ((3000, 5000), 0.002)])
def test_load_feature_reads_one_column(tmp_path, shape, density):
    """The API checks a weight column by reading that column alone (dense layout) or the
    sparse lists batch by batch: the same values as the loaded matrix's column."""
    import scipy.sparse as sp

    from app.services.filestore import storage

    X = sp.random(*shape, density=density, random_state=1, format="csr")
    y = np.random.default_rng(0).integers(0, 2, shape[0])
    meta = storage.write_dataset_files(tmp_path, X if density < 1 else X.toarray(), y)
    assert meta["layout"] == ("sparse" if density < 1 else "dense")
    for j in (0, 3, shape[1] - 1):
        np.testing.assert_array_equal(storage.load_feature(tmp_path, j),
                                      X[:, [j]].toarray().ravel())
