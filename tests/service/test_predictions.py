"""Batch prediction jobs on the real stack: POST /predictions runs a model over a stored
dataset in batches (the worker here reads 1,024 rows at a time), the result matches
/predict row for row and downloads as Parquet or CSV; multi-class results have one decision
column per class; a model with feature names reads the dataset's columns by name; bad
requests are problems; a running job cancels between batches and a queued one never runs;
GET /jobs/{id} shows a prediction job in its own shape."""

from __future__ import annotations

import io
import os
import time

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.fixtures.worker import WorkerProcess
from tests.service.jobs_helpers import TERMINAL, load_libsvm, submit, upload, wait_job

SMALL_BATCHES = {"SODM_PREDICT_BATCH_BYTES": "8192"}  # -> 1,024-row batches


def _wait(c: httpx.Client, job_id: str, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = c.get(f"/predictions/{job_id}").json()
        if job["state"] in TERMINAL:
            return job
        time.sleep(0.2)
    raise AssertionError(f"prediction {job_id} not finished: {job}")


def _train(c: httpx.Client, dataset_id: str, name: str, kernel: str = "rbf") -> dict:
    """Fixed lam / gamma / theta: no "auto" search (a batch job needs a model, not the
    best one; the search would cost minutes on a loaded machine)."""
    params = {"kernel": kernel, "lam": 100.0, "theta": 0.5,
              **({"gamma": "scale"} if kernel == "rbf" else {})}
    job = wait_job(c, submit(c, {"dataset_id": dataset_id, "algorithm": "odm", "name": name,
                                 "params": params, "seed": 2})["id"])
    assert job["state"] == "SUCCEEDED", job["error"]
    return c.get(f"/models/{job['model_id']}").json()


def _csv_upload(c: httpx.Client, name: str, table: pa.Table) -> dict:
    buf = io.BytesIO()
    pacsv.write_csv(table, buf)
    r = c.post("/datasets", files={"file": (f"{name}.csv", buf.getvalue())},
               data={"format": "csv", "label_column": "label", "name": name})
    assert r.status_code == 201, r.text
    return r.json()


def _result(c: httpx.Client, job: dict) -> pa.Table:
    r = c.get(job["links"]["parquet"])
    assert r.status_code == 200, r.text
    return pq.read_table(io.BytesIO(r.content))


@pytest.fixture(scope="module")
def stack(api_server, stack_env, tenant, datasets_dir, tmp_path_factory):
    """A worker with small prediction batches and the default lease (no fault here needs
    short ones; 4 s leases lapse on a loaded machine); svmguide1 (train), svmguide1.t
    (4,000 rows to predict) and a model trained on the first."""
    env = {**os.environ, **stack_env, **SMALL_BATCHES}
    w = WorkerProcess(env, tmp_path_factory.mktemp("worker") / "worker.log")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        try:
            w.wait_ready()
            train = upload(c, datasets_dir, "svmguide1")
            test = upload(c, datasets_dir, "svmguide1.t")
            model = _train(c, train["id"], "guide-batch")
            X_test, _ = load_libsvm(datasets_dir, "svmguide1.t", n_features=4)
            yield {"worker": w, "client": c, "train": train, "test": test, "model": model,
                   "X_test": X_test}
        finally:
            w.stop()


def test_batch_prediction_matches_predict_and_downloads(stack):
    c, model, test = stack["client"], stack["model"], stack["test"]
    c.put("/models/guide-batch/aliases/champion", json={"version": 1}).raise_for_status()
    r = c.post("/predictions", json={"model": "guide-batch@champion", "dataset_id": test["id"]})
    assert r.status_code == 202, r.text
    job = r.json()
    assert r.headers["location"] == f"/predictions/{job['id']}"
    assert (job["model_id"], job["model_name"], job["version"]) == (model["id"],
                                                                    "guide-batch", 1)
    done = _wait(c, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["progress"]["fraction"] == 1.0
    assert done["result"]["rows"] == 4000 and done["result"]["bytes"] > 0
    assert done["result"]["rows_out_of_range"] == 0 and done["result"]["out_of_range_row_ids"] == []
    # Parquet: every row in order, equal to /predict on the same rows
    table = _result(c, done)
    assert table.column_names == ["row_id", "true_label", "predicted_label", "decision_value"]
    assert table.column("row_id").to_pylist() == list(range(4000))
    sample = list(range(0, 4000, 97))
    online = c.post("/predict", json={"model_id": model["id"],
                                      "instances": stack["X_test"][sample].tolist()}).json()
    np.testing.assert_allclose(table.column("decision_value").to_numpy()[sample],
                               online["decision_values"], rtol=1e-9, atol=1e-12)
    assert table.column("predicted_label").to_numpy()[sample].tolist() == online["labels"]
    assert set(table.column("true_label").to_pylist()) == {0, 1}
    # CSV: the same table, streamed
    r = c.get(f"/predictions/{job['id']}/result", params={"format": "csv"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    as_csv = pacsv.read_csv(io.BytesIO(r.content))
    assert as_csv.num_rows == 4000 and as_csv.column_names == table.column_names
    np.testing.assert_allclose(as_csv.column("decision_value").to_numpy(),
                               table.column("decision_value").to_numpy(), rtol=1e-12)
    # GET /jobs/{id} shows it as a prediction job (model, dataset, rows, downloads)
    as_job = c.get(f"/jobs/{job['id']}").json()
    assert as_job == done and as_job["kind"] == "predict"
    assert (as_job["rows_done"], as_job["rows_total"]) == (4000, 4000)
    assert as_job["links"]["csv"] == f"/predictions/{job['id']}/result?format=csv"
    assert c.get(f"/jobs/{stack['model']['job_id']}").json()["kind"] == "train"
    # listed with the predictions, not with the training jobs
    assert job["id"] in [p["id"] for p in c.get("/predictions").json()["items"]]
    assert job["id"] not in [j["id"] for j in
                             c.get("/jobs", params={"limit": 500}).json()["items"]]
    # events end with the terminal state
    events = c.get(f"/predictions/{job['id']}/events").text
    assert "event: state" in events and "SUCCEEDED" in events


def test_named_columns_and_multiclass(stack):
    c = stack["client"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.argmax(X @ rng.normal(size=(3, 3)), axis=1)
    train = _csv_upload(c, "tri", pa.table({"label": y, "a": X[:, 0], "b": X[:, 1],
                                            "c": X[:, 2]}))
    model = _train(c, train["id"], "tri", kernel="linear")
    assert model["feature_names"] == ["a", "b", "c"] and model["classes"] == [0, 1, 2]
    # the same rows with the columns in another order and one more column
    other = _csv_upload(c, "tri-shuffled", pa.table({"label": y, "extra": X[:, 0] * 0 + 7,
                                                     "c": X[:, 2], "a": X[:, 0],
                                                     "b": X[:, 1]}))
    job = c.post("/predictions", json={"model_id": model["id"], "dataset_id": other["id"]})
    assert job.status_code == 202, job.text
    done = _wait(c, job.json()["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    table = _result(c, done)
    assert table.column_names == ["row_id", "true_label", "predicted_label", "decision_0",
                                  "decision_1", "decision_2"]
    online = c.post("/predict", json={"model_id": model["id"],
                                      "instances": X.tolist()}).json()
    F = np.column_stack([table.column(f"decision_{k}").to_numpy() for k in range(3)])
    np.testing.assert_allclose(F, online["decision_values"], rtol=1e-9, atol=1e-12)
    assert table.column("predicted_label").to_pylist() == online["labels"]
    # a dataset without one of the model's columns is refused, naming it
    missing = _csv_upload(c, "tri-missing", pa.table({"label": y, "a": X[:, 0],
                                                      "c": X[:, 2]}))
    r = c.post("/predictions", json={"model_id": model["id"], "dataset_id": missing["id"]})
    assert r.status_code == 422 and r.json()["missing"] == ["b"], r.text


def test_bad_prediction_requests(stack):
    c, test = stack["client"], stack["test"]

    def problem(r: httpx.Response, status: int) -> dict:
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        return r.json()

    problem(c.post("/predictions", json={"model": "no-such", "dataset_id": test["id"]}), 404)
    problem(c.post("/predictions", json={"model": "guide-batch", "dataset_id": "nope"}), 404)
    problem(c.post("/predictions", json={"dataset_id": test["id"]}), 422)
    problem(c.post("/predictions", json={"model": "guide-batch", "model_id": "x",
                                         "dataset_id": test["id"]}), 422)
    heart = c.post("/datasets", files={"file": ("h.libsvm", b"1 1:1 13:2\n-1 2:1\n")},
                   data={"format": "libsvm"}).json()
    body = problem(c.post("/predictions", json={"model": "guide-batch",
                                                "dataset_id": heart["id"]}), 422)
    assert "13 features" in body["detail"]
    problem(c.get("/predictions/no-such-job"), 404)
    train_job = c.get("/jobs", params={"limit": 1}).json()["items"][0]
    problem(c.get(f"/predictions/{train_job['id']}"), 404)  # a training job is not one


def test_a_running_prediction_cancels_between_batches(stack):
    """300,000 rows in 1,024-row batches through an RBF model: cancelled once some rows are
    done, the worker stops between batches (CANCELLED, fewer rows than the dataset's, no
    result) and its pool child takes the next job."""
    c = stack["client"]
    rng = np.random.default_rng(5)
    X = stack["X_test"]
    big = X[rng.integers(0, len(X), size=300_000)]
    table = pa.table({"label": rng.integers(0, 2, size=len(big)),
                      **{f"x{j}": big[:, j] for j in range(big.shape[1])}})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    r = c.post("/datasets", files={"file": ("big.parquet", buf.getvalue())},
               data={"format": "parquet", "label_column": "label", "name": "big"})
    assert r.status_code == 201, r.text
    big_ds = r.json()
    job = c.post("/predictions", json={"model": "guide-batch", "dataset_id": big_ds["id"]})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    assert job.json()["rows_total"] == 300_000 and job.json()["rows_done"] == 0
    deadline = time.monotonic() + 120
    while True:
        seen = c.get(f"/jobs/{job_id}").json()  # the job in its prediction shape
        if seen["state"] == "RUNNING" and seen["rows_done"]:
            break
        assert seen["state"] in ("QUEUED", "RUNNING") and time.monotonic() < deadline, seen
        time.sleep(0.05)
    assert seen["kind"] == "predict" and 0 < seen["rows_done"] < 300_000, seen
    assert seen["rows_done"] % 1024 == 0, "progress counts whole batches"
    assert "parquet" not in seen["links"]
    r = c.post(f"/jobs/{job_id}/cancel")  # the /jobs route cancels it too
    assert r.status_code == 202 and r.json()["state"] in ("CANCELLING", "CANCELLED"), r.text
    assert r.json()["kind"] == "predict"
    done = _wait(c, job_id, timeout=120)
    assert done["state"] == "CANCELLED" and done["result"] is None, done
    assert done["rows_done"] < 300_000, "stopped between batches, not at the end"
    assert c.get(f"/predictions/{job_id}/result").status_code == 409
    assert c.post(f"/predictions/{job_id}/cancel").status_code == 409
    # the worker is free again: the next job runs to the end
    probe = c.post("/predictions", json={"model": "guide-batch",
                                         "dataset_id": stack["test"]["id"]}).json()
    assert _wait(c, probe["id"])["state"] == "SUCCEEDED"


def test_a_queued_prediction_cancels_and_never_runs(stack, stack_env, tmp_path_factory):
    """With the worker stopped the job stays QUEUED: cancel -> CANCELLED, its result is a
    409, and a worker started afterwards does not run it."""
    c = stack["client"]
    stack["worker"].stop()
    r = c.post("/predictions", json={"model": "guide-batch", "dataset_id": stack["test"]["id"]})
    assert r.status_code == 202 and r.json()["state"] == "QUEUED"
    job_id = r.json()["id"]
    r = c.post(f"/predictions/{job_id}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED", r.text
    assert c.get(f"/predictions/{job_id}/result").status_code == 409
    assert c.post(f"/predictions/{job_id}/cancel").status_code == 409
    env = {**os.environ, **stack_env}
    w = WorkerProcess(env, tmp_path_factory.mktemp("worker") / "worker.log")
    try:
        w.wait_ready()
        probe = c.post("/predictions", json={"model": "guide-batch",
                                             "dataset_id": stack["test"]["id"]}).json()
        assert _wait(c, probe["id"])["state"] == "SUCCEEDED"  # the queue was drained
        job = c.get(f"/predictions/{job_id}").json()
        assert job["state"] == "CANCELLED" and job["attempt"] == 0 and job["result"] is None
    finally:
        w.stop()
