"""The Open Inference Protocol (V2) routes on the real stack, called with Triton's own
client (``tritonclient.http``): server and model health, metadata, inference of 1 and 1,000
rows (binary tensors, tritonclient's default, and JSON) equal to ``/predict``'s decision
values, by name, version and alias; named-feature tensors and string labels; errors in the
protocol's ``{"error": ...}`` shape with ``/predict``'s statuses, keys and rate limits."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.service.jobs_helpers import HEART_NAMES, load_libsvm, train_model, upload_as

NAMES = HEART_NAMES
FAST_RBF = {"kernel": "rbf", "gamma": 0.1, "lam": 10.0, "theta": 0.3}


@pytest.fixture(scope="module")
def heart(datasets_dir):
    return load_libsvm(datasets_dir, "heart_scale", n_features=13)


@pytest.fixture(scope="module")
def models(api_server, tenant, datasets_dir, worker, heart):
    """``oip`` v1 (plain), v2 (Platt probabilities, alias ``champion``); ``oipnamed``: CSV
    columns and string labels."""
    X, y = heart
    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    lines = [",".join(["yes" if label > 0 else "no", *(repr(float(v)) for v in row)])
             for row, label in zip(X, y, strict=True)]
    csv = (",".join(["label", *NAMES]) + "\n" + "\n".join(lines)).encode()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        r = c.post("/datasets", files={"file": ("heart.csv", csv)},
                   data={"format": "csv", "name": "heart-csv"})
        assert r.status_code == 201, r.text
        base = {"dataset_id": ds["id"], "algorithm": "sodm", "seed": 1, "name": "oip",
                "test_fraction": 0.2}
        plain = train_model(c, {**base, "params": FAST_RBF})
        calibrated = train_model(c, {**base, "params": {**FAST_RBF, "probability": True}})
        named = train_model(c, {"dataset_id": r.json()["id"], "algorithm": "odm", "seed": 1,
                             "name": "oipnamed", "params": FAST_RBF})
        assert c.put("/models/oip/aliases/champion", json={"version": 2}).status_code == 200
    return {"plain": plain, "calibrated": calibrated, "named": named}


@pytest.fixture
def triton_client(api_server):
    c = triton.InferenceServerClient(url=api_server.removeprefix("http://"),
                                     connection_timeout=60, network_timeout=120)
    yield c
    c.close()


@pytest.fixture
def auth(tenant):
    return {"Authorization": f"Bearer {tenant[1]}"}


def _predict(client: httpx.Client, model: str, X: np.ndarray) -> dict:
    r = client.post("/predict", json={"model": model, "instances": X.tolist()})
    assert r.status_code == 200, r.text
    return r.json()


def test_server_and_model_health_and_metadata(triton_client, auth, models):
    assert triton_client.is_server_live()
    assert triton_client.is_server_ready()
    meta = triton_client.get_server_metadata()
    assert meta["name"] == "sodm" and "binary_tensor_data" in meta["extensions"]
    assert triton_client.is_model_ready("oip", headers=auth)
    assert triton_client.is_model_ready("oip", "1", headers=auth)
    assert triton_client.is_model_ready("oip@champion", headers=auth)
    assert not triton_client.is_model_ready("oip", "9", headers=auth)
    assert not triton_client.is_model_ready("no-such-model", headers=auth)
    assert not triton_client.is_model_ready("oip")  # no key: not this tenant's model

    latest = triton_client.get_model_metadata("oip", headers=auth)
    assert latest["name"] == "oip" and latest["versions"] == ["1", "2"]
    assert latest["platform"] == "sodm"
    assert latest["inputs"] == [{"name": "X", "datatype": "FP64", "shape": [-1, 13]}]
    assert latest["outputs"] == [
        {"name": "label", "datatype": "INT64", "shape": [-1]},
        {"name": "decision_function", "datatype": "FP64", "shape": [-1]},
        {"name": "probabilities", "datatype": "FP64", "shape": [-1, 2]}]
    v1 = triton_client.get_model_metadata("oip", "1", headers=auth)
    assert v1["parameters"]["model_id"] == models["plain"]["id"]
    assert [o["name"] for o in v1["outputs"]] == ["label", "decision_function"]
    champion = triton_client.get_model_metadata("oip@champion", headers=auth)
    assert champion["parameters"]["model_id"] == models["calibrated"]["id"]
    named = triton_client.get_model_metadata("oipnamed", headers=auth)
    assert [i["name"] for i in named["inputs"]] == NAMES
    assert named["outputs"][0] == {"name": "label", "datatype": "BYTES", "shape": [-1]}


def _infer(triton_client, auth, model: str, X: np.ndarray, version: str = "",
           binary: bool = True, outputs=("label", "decision_function"), **kw):
    from tritonclient.utils import np_to_triton_dtype

    x = triton.InferInput("X", list(X.shape), np_to_triton_dtype(X.dtype))
    x.set_data_from_numpy(X, binary_data=binary)
    wanted = [triton.InferRequestedOutput(n, binary_data=binary) for n in outputs]
    # a copy: tritonclient adds Inference-Header-Content-Length to the dict it is given
    return triton_client.infer(model, [x], model_version=version, outputs=wanted,
                               headers=dict(auth), request_id="req-1", **kw)


@pytest.mark.parametrize("rows", [1, 1000])
def test_inference_equals_predict(triton_client, auth, client, models, heart, rows):
    X = heart[0][np.random.default_rng(rows).integers(0, len(heart[0]), rows)]
    expected = _predict(client, "oip@1", X)
    for binary in (True, False):
        res = _infer(triton_client, auth, "oip", X, version="1", binary=binary)
        np.testing.assert_array_equal(res.as_numpy("decision_function"),
                                      np.asarray(expected["decision_values"]))
        assert res.as_numpy("label").dtype == np.int64
        assert res.as_numpy("label").tolist() == expected["labels"]
        out = res.get_response()
        assert out["model_name"] == "oip" and out["model_version"] == "1"
        assert out["id"] == "req-1"
    # a compressed request (tritonclient's request_compression_algorithm)
    for algorithm in ("gzip", "deflate"):
        res = _infer(triton_client, auth, "oip@1", X, request_compression_algorithm=algorithm)
        np.testing.assert_array_equal(res.as_numpy("decision_function"),
                                      np.asarray(expected["decision_values"]))
    # float32 rows are widened as /predict would read them
    res = _infer(triton_client, auth, "oip@1", X.astype(np.float32))
    np.testing.assert_array_equal(res.as_numpy("decision_function"), np.asarray(
        _predict(client, "oip@1", X.astype(np.float32).astype(np.float64))["decision_values"]))


def test_alias_probabilities_and_all_outputs_by_default(triton_client, auth, client, models,
                                                        heart):
    X = heart[0][:7]
    expected = _predict(client, "oip@champion", X)
    x = triton.InferInput("X", [7, 13], "FP64")
    x.set_data_from_numpy(X)
    res = triton_client.infer("oip@champion", [x], headers=dict(auth))  # all outputs, binary
    assert [o["name"] for o in res.get_response()["outputs"]] == [
        "label", "decision_function", "probabilities"]
    np.testing.assert_array_equal(res.as_numpy("probabilities"),
                                  np.asarray(expected["probabilities"]))
    np.testing.assert_array_equal(res.as_numpy("decision_function"),
                                  np.asarray(expected["decision_values"]))
    with pytest.raises(InferenceServerException) as exc:  # v1 has no probabilities
        _infer(triton_client, auth, "oip", X, version="1", outputs=("probabilities",))
    assert exc.value.status() == "400" and "probability=true" in exc.value.message()


def test_named_feature_tensors_and_string_labels(triton_client, auth, client, models, heart):
    X = heart[0][:20]
    expected = _predict(client, "oipnamed", X)
    columns = []
    for j, name in enumerate(NAMES):
        t = triton.InferInput(name, [20], "FP64")
        t.set_data_from_numpy(np.ascontiguousarray(X[:, j]), binary_data=j % 2 == 0)
        columns.append(t)
    for binary in (True, False):
        res = triton_client.infer("oipnamed", columns[::-1], headers=dict(auth), outputs=[
            triton.InferRequestedOutput(n, binary_data=binary)
            for n in ("label", "decision_function")])
        assert [v.decode() if isinstance(v, bytes) else v
                for v in res.as_numpy("label").tolist()] == expected["labels"]
        assert set(expected["labels"]) <= {"yes", "no"}
        np.testing.assert_array_equal(res.as_numpy("decision_function"),
                                      np.asarray(expected["decision_values"]))
    one = triton.InferInput("X", [20, 13], "FP64")  # the matrix form works for it too
    one.set_data_from_numpy(X)
    np.testing.assert_array_equal(
        triton_client.infer("oipnamed", [one], headers=dict(auth)).as_numpy("decision_function"),
        np.asarray(expected["decision_values"]))
    with pytest.raises(InferenceServerException) as exc:
        triton_client.infer("oipnamed", columns[:-1], headers=dict(auth))
    assert exc.value.status() == "422" and "missing feature(s) ['thal']" in exc.value.message()


def test_errors_are_the_protocols_shape_with_predicts_statuses(api_server, auth, tenant,
                                                               triton_client, models, heart):
    X = heart[0][:2]

    def refused(model: str, X: np.ndarray, status: str, fragment: str, **kw) -> None:
        with pytest.raises(InferenceServerException) as exc:
            _infer(triton_client, auth, model, X, **kw)
        assert exc.value.status() == status, exc.value
        assert fragment in exc.value.message(), exc.value.message()

    refused("no-such-model", X, "404", "no model")
    refused("oip@missing", X, "404", "no alias 'missing'")
    refused("oip", X, "404", "no model", version="7")
    refused("oip", X[:, :12], "422", "the model expects 13")
    refused("oip", np.where(np.arange(26).reshape(2, 13) == 5, np.nan, X), "422",
            "row 0, feature 5: nan is not finite")
    with httpx.Client(base_url=api_server, timeout=60) as c:
        url = "/v2/models/oip/infer"
        body = {"inputs": [{"name": "X", "shape": [1, 13], "datatype": "FP64",
                            "data": X[0].tolist()}]}
        for headers, status, fragment in (
                ({}, 401, "missing Authorization"),
                ({"Authorization": "Bearer nope"}, 401, "unknown, malformed or revoked")):
            r = c.post(url, json=body, headers=headers)
            assert r.status_code == status and fragment in r.json()["error"], r.text
            assert r.headers["content-type"] == "application/json"
        cases = [
            ({**body, "inputs": [{**body["inputs"][0], "shape": [2, 13]}]}, 400,
             "shape [2, 13] has 26 elements, data has 13"),
            ({**body, "inputs": [{**body["inputs"][0], "datatype": "BYTES"}]}, 422,
             "datatype 'BYTES'"),
            ({**body, "inputs": [{**body["inputs"][0],
                                  "data": [True] + X[0].tolist()[1:]}]}, 422, "true/false"),
            ({**body, "outputs": [{"name": "margin"}]}, 400, "the outputs are label"),
            # a small body asking for one output 100,000 times must not multiply the answer
            ({**body, "outputs": [{"name": "label"}] * 100_000}, 400,
             "outputs[1]: 'label' is asked for twice"),
            ({"inputs": []}, 400, "inputs must be a non-empty array"),
        ]
        for doc, status, fragment in cases:
            r = c.post(url, json=doc, headers=auth)
            assert r.status_code == status and fragment in r.json()["error"], (doc, r.text)
            assert set(r.json()) == {"error"}
        r = c.post(url, content=b"{", headers=auth)
        assert r.status_code == 400 and "not JSON" in r.json()["error"]
        r = c.post(url, content=b'{"inputs": []}xx',
                   headers={**auth, "Inference-Header-Content-Length": "99"})
        assert r.status_code == 400 and "Inference-Header-Content-Length" in r.json()["error"]
        r = c.get("/v2/models/oip/nothing-here", headers=auth)
        assert r.status_code == 404 and set(r.json()) == {"error"}
        # the same key's rate limit as /predict: the answer carries its headers
        r = c.post(url, json=body, headers=auth)
        assert r.status_code == 200 and r.headers["ratelimit-policy"].startswith('"key"')


def test_row_limit_and_rate_limit(triton_client, auth, start_api, make_tenant, models):
    """The row limit and the key's rate limit apply as they do to /predict: 413 past
    SODM_MAX_PREDICT_ROWS, 429 with Retry-After when the key's allowance is spent."""
    with pytest.raises(InferenceServerException) as exc:
        _infer(triton_client, auth, "oip", np.zeros((10_001, 13)))
    assert exc.value.status() == "413" and "at most 10000" in exc.value.message()
    server = start_api(SODM_RATE_LIMIT_PER_MINUTE="3")
    _, key = make_tenant()
    body = {"inputs": [{"name": "X", "shape": [1, 13], "datatype": "FP64", "data": [0] * 13}]}
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        answers = [c.post("/v2/models/oip/infer", json=body) for _ in range(4)]
    assert [r.status_code for r in answers] == [404, 404, 404, 429]  # not this tenant's
    assert "Retry-After" in answers[-1].headers and set(answers[-1].json()) == {"error"}
