"""Finite inputs whose decision value is not finite (issue 36): 1e308 passes the inputs'
finiteness check but overflows a linear or polynomial kernel sum, and the answer used to be
a 200 with ``null`` decision values and a label drawn from NaN. Every prediction protocol
(``/predict`` JSON and ``.npy``, the Open Inference Protocol, MLflow's invocations) now
answers a 422 naming the row and its largest value, on the real uvicorn."""

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
