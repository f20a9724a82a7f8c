"""MLflow's scoring protocol, ``POST /models/{name}/invocations``, on the real stack: the
payloads MLflow documents for ``mlflow models serve`` (``dataframe_split``,
``dataframe_records``, ``instances``, ``inputs``, ``text/csv``; several made by MLflow's
own ``convert_input_example_to_serving_input``) answer ``{"predictions": ...}`` equal to
``/predict``'s, for a model with named columns and one without, by name, version and alias;
bad payloads are 4xx problems naming what is wrong."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pandas as pd
import pytest
from mlflow.models import convert_input_example_to_serving_input

from tests.service.jobs_helpers import HEART_NAMES, load_libsvm, train_model, upload_as

NAMES = HEART_NAMES
PARAMS = {"kernel": "rbf", "gamma": 0.1, "lam": 10.0, "theta": 0.3}


@pytest.fixture(scope="module")
def heart(datasets_dir):
    return load_libsvm(datasets_dir, "heart_scale", n_features=13)


@pytest.fixture(scope="module")
def models(api_server, tenant, datasets_dir, worker, heart):
    X, y = heart
    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    csv = "label," + ",".join(NAMES) + "\n" + "\n".join(
        ",".join([str(int(label)), *(repr(float(v)) for v in row)])
        for row, label in zip(X, y, strict=True))
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        r = c.post("/datasets", files={"file": ("heart.csv", csv.encode())},
                   data={"format": "csv"})
        assert r.status_code == 201, r.text
        plain = train_model(c, {"dataset_id": ds["id"], "algorithm": "odm", "seed": 3,
                             "name": "mlf", "params": PARAMS})
        named = train_model(c, {"dataset_id": r.json()["id"], "algorithm": "odm", "seed": 3,
                             "name": "mlfnamed", "params": {**PARAMS, "probability": True}})
        assert c.put("/models/mlfnamed/aliases/prod", json={"version": 1}).status_code == 200
    return {"plain": plain, "named": named}


def _expected(client: httpx.Client, model: str, X: np.ndarray) -> dict:
    r = client.post("/predict", json={"model": model, "instances": X.tolist()})
    assert r.status_code == 200, r.text
    return r.json()


def _invoke(client: httpx.Client, model: str, content: str | bytes,
            ctype: str = "application/json") -> httpx.Response:
    return client.post(f"/models/{model}/invocations", content=content,
                       headers={"Content-Type": ctype})


def _predictions(r: httpx.Response) -> list:
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"predictions"}
    return r.json()["predictions"]


def test_every_documented_payload_of_a_named_model(client, models, heart):
    X = heart[0][:9]
    df = pd.DataFrame(X, columns=NAMES)
    labels = _expected(client, "mlfnamed", X)["labels"]
    shuffled = df[NAMES[::-1]]  # columns are matched by name
    payloads = {
        # MLflow's own serializer of a DataFrame input example: dataframe_split
        "mlflow dataframe": convert_input_example_to_serving_input(shuffled),
        # ... and of a dict of columns: inputs
        "mlflow columns": convert_input_example_to_serving_input(
            {n: df[n].to_numpy() for n in NAMES}),
        "dataframe_split": json.dumps({"dataframe_split": json.loads(
            shuffled.to_json(orient="split", index=False))}),
        "dataframe_records": json.dumps({"dataframe_records": json.loads(
            shuffled.to_json(orient="records"))}),
        "instances (records)": json.dumps({"instances": df.to_dict(orient="records")}),
        "instances (rows)": json.dumps({"instances": X.tolist()}),
        "inputs (rows)": json.dumps({"inputs": X.tolist()}),
        "params": json.dumps({"dataframe_split": {"columns": NAMES, "data": X.tolist()},
                              "params": {"predict_method": "predict"}}),
    }
    for kind, payload in payloads.items():
        assert _predictions(_invoke(client, "mlfnamed", payload)) == labels, kind
    assert _predictions(_invoke(client, "mlfnamed@prod", shuffled.to_csv(index=False),
                                "text/csv")) == labels
    assert set(labels) <= {-1, 1}


def test_methods_and_a_positional_model(client, models, heart):
    X = heart[0][40:52]
    plain = _expected(client, "mlf@1", X)
    split = {"dataframe_split": {"columns": [f"x{j}" for j in range(13)], "data": X.tolist()}}
    assert _predictions(_invoke(client, "mlf@1", json.dumps(split))) == plain["labels"]
    # without names, columns count by position; a record's keys are 0-based indices
    records = [{str(j): v for j, v in enumerate(row) if v != 0} for row in X.tolist()]
    assert _predictions(_invoke(client, "mlf", json.dumps(
        {"dataframe_records": records}))) == plain["labels"]
    np.testing.assert_allclose(_predictions(_invoke(client, "mlf", json.dumps(
        {**split, "params": {"predict_method": "decision_function"}}))),
        plain["decision_values"], rtol=1e-12)
    named = _expected(client, "mlfnamed", X)
    np.testing.assert_allclose(_predictions(_invoke(client, "mlfnamed", json.dumps(
        {"inputs": X.tolist(), "params": {"predict_method": "predict_proba"}}))),
        named["probabilities"], rtol=1e-12)


def test_bad_payloads_are_problems(client, models, heart):
    row = heart[0][0].tolist()

    def refused(model: str, content: str, status: int, fragment: str,
                ctype: str = "application/json") -> None:
        r = _invoke(client, model, content, ctype)
        assert r.status_code == status, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert fragment in r.json()["detail"], r.json()

    refused("mlf", json.dumps({"instances": [row], "inputs": [row]}), 422, "exactly one of")
    refused("mlf", json.dumps({"rows": [row]}), 422, "exactly one of")
    refused("mlf", json.dumps({"instances": [row[:12]]}), 422, "expects 13")
    refused("mlf", json.dumps({"dataframe_split": {"columns": ["a"] * 12,
                                                   "data": [row[:12]]}}), 422, "12 columns")
    refused("mlfnamed", json.dumps({"dataframe_split": {"columns": NAMES[:-1] + ["thall"],
                                                        "data": [row]}}), 422, "thall")
    refused("mlf", json.dumps({"instances": [row], "params": {"predict_method": "fit"}}), 422,
            "predict_method")
    refused("mlf", json.dumps({"instances": [row],
                               "params": {"predict_method": "predict_proba"}}), 400,
            "probability=true")
    refused("mlf", "age,chol\n1,x\n", 422, "must be numbers", "text/csv")
    refused("mlf", "<xml/>", 415, "text/csv", "application/xml")
    refused("mlf@nope", json.dumps({"instances": [row]}), 404, "no alias 'nope'")
