"""Finite inputs whose decision value is not finite (issue 36): 1e308 passes the inputs'
finiteness check but overflows a linear or polynomial kernel sum, and the answer used to be
a 200 with ``null`` decision values and a label drawn from NaN. Every prediction protocol
(``/predict`` JSON and ``.npy``, the Open Inference Protocol, MLflow's invocations) now
answers a 422 naming the row and its largest value, on the real uvicorn. A training job
whose held-out data overflows that way failed with an internal error (its metrics held NaN,
which the JSONB columns refuse): it now fails with a 422 naming the row."""

from __future__ import annotations

import io
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

ROWS = np.array([[0.2, -0.4], [0.9, 0.1], [-0.7, 0.5], [-0.1, -0.9], [0.6, 0.7],
                 [-0.5, -0.2], [0.3, 0.8], [-0.8, -0.6]])


@pytest.fixture(scope="module")
def overflow_models(api_server: str, make_tenant) -> Iterator[tuple[httpx.Client, dict]]:
    """A tenant with a linear, a polynomial and a three-class polynomial model (2 features)."""
    from solver import ODMClassifier
    from tests.service.model_rows import dataset_row, register_model

    tenant_id, key = make_tenant()
    y2 = np.where(ROWS[:, 0] + ROWS[:, 1] > 0, 1, -1)
    y3 = np.array([0, 1, 2, 0, 1, 2, 0, 1])
    ds = dataset_row(tenant_id, len(ROWS), 2)
    ids = {"lin": register_model(tenant_id, ds, ODMClassifier(kernel="linear").fit(ROWS, y2),
                                 "ovf-lin"),
           "poly": register_model(tenant_id, ds, ODMClassifier(
               kernel="poly", degree=3, gamma=1.0).fit(ROWS, y2), "ovf-poly"),
           "multi": register_model(tenant_id, ds, ODMClassifier(
               kernel="poly", degree=3, gamma=1.0).fit(ROWS, y3), "ovf-multi")}
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        yield c, ids


def _overflow(r: httpx.Response, row: int, problem_json: bool = True) -> dict:
    assert r.status_code == 422, r.text
    body = r.json()  # JSON, never a 500 or NaN
    if problem_json:
        assert r.headers["content-type"].startswith("application/problem+json")
        assert body["type"].endswith("/values-out-of-range"), body
        assert body["row"] == row and body["field"].startswith(f"instances[{row}]"), body
        assert "not finite" in body["detail"]
    else:  # the Open Inference Protocol's own error shape
        assert f"row {row}" in body["error"] and "not finite" in body["error"], body
    return body


@pytest.mark.parametrize("model", ["lin", "poly", "multi"])
@pytest.mark.parametrize("rows", [[[1e308, 1e308]], [[0.1, 0.2], [1.7e308, 1.7e308]],
                                  [[0.1, 0.2], [0.3, 0.4], [-1e308, -1e308]]])
def test_predict_json_and_npy(overflow_models, model: str, rows: list[list[float]]) -> None:
    client, ids = overflow_models
    row = len(rows) - 1
    body = _overflow(client.post("/predict", json={"model_id": ids[model],
                                                   "instances": rows}), row)
    assert body["field"] == f"instances[{row}][0]", body  # its largest value
    buf = io.BytesIO()
    np.save(buf, np.array(rows))
    _overflow(client.post("/predict", params={"model_id": ids[model]}, content=buf.getvalue(),
                          headers={"Content-Type": "application/x-npy"}), row)
    # the same rows without the huge one are served
    ok = client.post("/predict", json={"model_id": ids[model], "instances": rows[:row] or
                                       [[0.1, 0.2]]})
    assert ok.status_code == 200 and None not in np.ravel(ok.json()["decision_values"]), ok.text


def test_sparse_rows_name_the_feature(overflow_models) -> None:
    client, ids = overflow_models
    body = _overflow(client.post("/predict", json={
        "model_id": ids["poly"], "instances": [{"0": 0.5}, {"1": 1e308, "0": 2.0}]}), 1)
    assert body["field"] == "instances[1][1]" and "1e+308" in body["detail"], body


@pytest.mark.parametrize("model", ["lin", "poly"])
def test_open_inference_and_mlflow(overflow_models, model: str) -> None:
    client, ids = overflow_models
    name = f"ovf-{model}"
    _overflow(client.post(f"/v2/models/{name}/infer", json={"inputs": [
        {"name": "X", "shape": [2, 2], "datatype": "FP64",
         "data": [0.1, 0.2, 1e308, 1e308]}]}), 1, problem_json=False)
    _overflow(client.post(f"/models/{name}/invocations",
                          json={"inputs": [[1e308, 1e308]]}), 0)
    _overflow(client.post(f"/models/{name}/invocations", json={
        "dataframe_split": {"columns": ["a", "b"], "data": [[0.0, 0.0], [1e308, 1e308]]}}), 1)


@pytest.mark.parametrize(("params", "state"), [
    ({"kernel": "linear"}, "SUCCEEDED"),  # margins near 1e306: their squares overflowed
    ({"kernel": "linear", "probability": True}, "SUCCEEDED"),
    ({"kernel": "poly", "degree": 3}, "FAILED"),  # decision values past float64
])
def test_held_out_rows_past_float64(client, worker, datasets_dir, params: dict,
                                    state: str) -> None:
    """Held-out rows of 1e308: a finite margin of 1e306 made the stored margin reference's
    sum of squares infinite and the job's commit failed (an internal error after three
    tries); a decision value that is not finite at all now fails the job with a 422 naming
    the test data's row instead of sklearn's "Input contains NaN"."""
    from tests.service.jobs_helpers import libsvm_bytes, submit, upload, wait_job

    train = upload(client, datasets_dir, "heart_scale")
    lines = libsvm_bytes(datasets_dir, "heart_scale").decode().splitlines()[:30]
    lines[4] = lines[4].split()[0] + " 1:1e308 2:1e308"  # row 5 of the test dataset
    test = client.post("/datasets", files={"file": ("huge.libsvm", "\n".join(lines).encode())})
    assert test.status_code == 201, test.text
    job = submit(client, {"dataset_id": train["id"], "algorithm": "odm", "params": params,
                          "test_dataset_id": test.json()["id"]})
    done = wait_job(client, job["id"])
    assert done["state"] == state and done["attempt"] == 1, done
    if state == "SUCCEEDED":
        model = client.get(f"/models/{done['model_id']}")
        assert model.status_code == 200 and model.json()["metrics"]["n_test"] == 30
        monitoring = client.get(f"/models/{done['model_id']}/monitoring")
        assert monitoring.status_code == 200 and monitoring.json()["reference"]["n"] == 30
        return
    error = done["error"]
    assert error["status"] == 422, error  # not "internal error (request id ...)"
    assert "not finite" in error["detail"] and "first row 5" in error["detail"], error
    assert "1e+308" in error["detail"] and done["model_id"] is None
