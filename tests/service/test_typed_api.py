"""The typed API: one parameter spec per estimator parameter drives validation (with this
server's limits), ``GET /algorithms`` and the OpenAPI document; a client generated from
``/openapi.json`` by openapi-python-client compiles and round-trips a training job."""

from __future__ import annotations

import compileall
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.core.config import get_settings
from app.services.job_queue import algorithm_specs as algorithms
from app.services.job_queue.autoparams import SERVICE_DEFAULTS
from solver import ODMClassifier, SODMClassifier
from solver.core.formulation import ODMParams
from solver.exceptions import InvalidParameterError
from tests.service.jobs_helpers import upload_as

LIMITED = sorted({s.name for a in algorithms.ALGORITHMS.values() for s in a.params if s.limit})
# the API takes n_jobs -1 (all cores) or 1..limit, the library any non-zero int; the API
# keeps lam, upsilon, gamma and coef0 within 1e+-12, the library within float64's range
SERVICE_STRICTER = {"n_jobs", "lam", "upsilon", "gamma", "coef0"}
OPERATION_IDS = {
    "livez", "readyz", "metrics", "list_algorithms", "upload_dataset", "list_datasets",
    "get_dataset", "delete_dataset", "train", "list_jobs", "get_job", "cancel_job",
    "job_events", "list_models", "get_model", "delete_model", "model_file", "predict",
    "update_model", "list_aliases", "set_alias", "delete_alias", "create_prediction",
    "list_predictions", "get_prediction", "cancel_prediction", "prediction_events",
    "prediction_result",
}


# ------------------------------------------------------------------- specs (no stack)
def test_specs_cover_every_estimator_parameter():
    for name, alg in algorithms.ALGORITHMS.items():
        est_params = set(alg.estimator().get_params(deep=False)) - set(
            algorithms.REQUEST_PARAMS)
        assert {s.name for s in alg.params} == est_params, name
        for spec in alg.params:  # the defaults are the estimator's (lam / gamma / theta:
            # the service's "auto") and pass their own spec
            expected = SERVICE_DEFAULTS.get(spec.name, alg.estimator().get_params()[spec.name])
            assert spec.default == expected
            spec.check(spec.default)


def _edges(spec: algorithms.ParamSpec) -> tuple[list, list]:
    """Values on each side of the spec's bounds: (accepted, refused)."""
    ok, bad = [], []
    step = 1 if spec.type is algorithms.ParamType.INTEGER else 1e-9
    if spec.minimum is not None:
        ok.append(spec.minimum if step == 1 else float(spec.minimum))
        bad.append(spec.minimum - max(step, abs(spec.minimum) * 1e-9))
    if spec.maximum is not None:
        ok.append(spec.maximum if step == 1 else float(spec.maximum))
        bad.append(spec.maximum + max(step, abs(spec.maximum) * 1e-9))
    if spec.exclusive_minimum is not None:
        ok.append(spec.exclusive_minimum + step)
        bad.append(spec.exclusive_minimum)
    if spec.exclusive_maximum is not None:
        ok.append(spec.exclusive_maximum - step * 1e3)
        bad.append(spec.exclusive_maximum)
    if spec.nonzero:
        bad.append(0)
    if spec.type is algorithms.ParamType.BOOLEAN:
        ok.append(False)
        bad += [1, "true"]
    elif spec.type is not algorithms.ParamType.CHOICE:
        bad += [True, "text", float("nan")]
    (ok if spec.nullable else bad).append(None)
    return ok, bad


@pytest.mark.parametrize("name", algorithms.ALGORITHM_NAMES)
def test_spec_bounds_agree_with_the_estimators_own_checks(name):
    """Inside a bound the solver accepts the value; outside it the service refuses it with a
    ParamError naming the field (no message parsing)."""
    for spec in algorithms.ALGORITHMS[name].params:
        ok, bad = _edges(spec)
        for v in ok:
            algorithms.build_estimator(name, {spec.name: v}, 0)  # no error
        for v in bad:
            with pytest.raises(algorithms.ParamError) as err:
                algorithms.build_estimator(name, {spec.name: v}, 0)
            assert err.value.field == f"params.{spec.name}", (spec.name, v)
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v \
                    and spec.name not in SERVICE_STRICTER:
                est = algorithms.ALGORITHMS[name].estimator(**{spec.name: v})
                with pytest.raises(InvalidParameterError) as solver_err:
                    est.validate_params()  # the solver refuses it too, naming it
                assert solver_err.value.name == spec.name


def test_solver_errors_carry_the_parameter_name():
    cases = [(SODMClassifier(p=1), "p"), (SODMClassifier(n_jobs=0), "n_jobs"),
             (ODMClassifier(kernel="sigmoid"), "kernel"), (ODMClassifier(theta=1.0), "theta"),
             (ODMClassifier(random_state="x"), "random_state")]
    for est, name in cases:
        with pytest.raises(InvalidParameterError) as err:
            est.validate_params()
        assert err.value.name == name and isinstance(err.value, ValueError)
    with pytest.raises(InvalidParameterError) as err:
        ODMParams(lam=1.0, upsilon=-1.0).validate()
    assert err.value.name == "upsilon"


# --------------------------------------------------------------------- on the stack
@pytest.fixture(scope="module")
def heart(api_server, tenant, datasets_dir):
    return upload_as(api_server, tenant, datasets_dir, "heart_scale")


def test_algorithms_list_specs_defaults_and_limits(client):
    r = client.get("/algorithms")
    assert r.status_code == 200, r.text
    items = {a["name"]: a for a in r.json()["items"]}
    assert set(items) == set(algorithms.ALGORITHM_NAMES)
    assert items["sodm"]["backends"] == ["local", "spark"]
    sodm = {p["name"]: p for p in items["sodm"]["params"]}
    assert sodm["lam"]["default"] == "auto" and "auto" in sodm["lam"]["words"]
    assert sodm["gamma"]["words"] == ["scale", "auto"] and sodm["theta"]["words"] == ["auto"]
    assert sodm["p"]["nullable"] and sodm["p"]["minimum"] == 2
    assert sodm["n_jobs"]["limit"] == {"value": get_settings().limit_n_jobs,
                                       "setting": "SODM_LIMIT_N_JOBS"}
    assert sodm["n_jobs"]["schema"]["anyOf"][0]["maximum"] == get_settings().limit_n_jobs
    svrg = {p["name"]: p for p in items["svrg"]["params"]}
    assert svrg["kernel"]["choices"] == ["linear"] and svrg["tol"]["default"] == 1e-6
    assert {p["name"] for p in items["dc"]["params"]} >= {"fanout", "sample_size"}
    assert client.get("/algorithms", headers={"Authorization": ""}).status_code == 401


def _limit_problem(r: httpx.Response, field: str, setting: str) -> dict:
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["type"].endswith("/limit-exceeded"), body
    err = body["errors"][0]
    assert err["field"] == field and err["setting"] == setting, body
    assert setting in body["detail"]
    return err


def test_every_costly_parameter_has_a_server_limit(client, heart):
    """Each parameter that costs memory or time is refused above its limit, naming it."""
    settings = get_settings()
    assert {"cache_size", "n_jobs", "levels", "p", "n_strata", "landmark_candidates", "epochs",
            "max_iter", "degree"} <= set(LIMITED)
    for param in LIMITED:
        alg = next(a for a in algorithms.ALGORITHMS.values() if a.spec(param) and
                   a.spec(param).limit)
        spec = alg.spec(param)
        limit = getattr(settings, spec.limit)
        r = client.post("/train", json={"dataset_id": heart["id"], "algorithm": alg.name,
                                        "params": {param: int(limit) + 1}})
        err = _limit_problem(r, f"params.{param}", spec.limit_setting())
        assert err["limit"] == limit
    # the search grid: its size and each value
    lams = [float(i + 1) for i in range(settings.limit_grid_points + 1)]
    _limit_problem(client.post("/train", json={"dataset_id": heart["id"], "algorithm": "odm",
                                               "search": {"grid": {"lam": lams}}}),
                   "search.grid", "SODM_LIMIT_GRID_POINTS")
    _limit_problem(client.post("/train", json={
        "dataset_id": heart["id"], "algorithm": "odm",
        "search": {"grid": {"max_iter": [10, settings.limit_max_iter + 1]}}}),
        "search.grid.max_iter", "SODM_LIMIT_MAX_ITER")


def test_limits_are_settings(start_api, tenant, heart):
    api = start_api(SODM_LIMIT_N_JOBS="2", SODM_LIMIT_GRID_POINTS="4")
    with httpx.Client(base_url=api.url, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        err = _limit_problem(c.post("/train", json={"dataset_id": heart["id"],
                                                    "params": {"n_jobs": 3}}),
                             "params.n_jobs", "SODM_LIMIT_N_JOBS")
        assert err["limit"] == 2
        _limit_problem(c.post("/train", json={"dataset_id": heart["id"], "algorithm": "odm",
                                              "search": {"grid": {"lam": [1, 2, 3, 4, 5]}}}),
                       "search.grid", "SODM_LIMIT_GRID_POINTS")
        sodm = next(a for a in c.get("/algorithms").json()["items"] if a["name"] == "sodm")
        assert next(p for p in sodm["params"] if p["name"] == "n_jobs")["limit"]["value"] == 2
        spec = c.get("/openapi.json").json()["components"]["schemas"]["SODMParams"]
        assert spec["properties"]["n_jobs"]["anyOf"][0]["maximum"] == 2


def test_openapi_union_enum_examples_and_operation_ids(client, api_server):
    doc = httpx.get(api_server + "/openapi.json").json()
    schemas = doc["components"]["schemas"]
    union = schemas["TrainRequest"]
    assert union["discriminator"]["propertyName"] == "algorithm"
    assert set(union["discriminator"]["mapping"]) == set(algorithms.ALGORITHM_NAMES)
    sodm = schemas["SODMTrainRequest"]
    assert sodm["properties"]["algorithm"]["const"] == "sodm"
    assert sodm["properties"]["params"]["$ref"].endswith("/SODMParams")
    params = schemas["SODMParams"]
    assert params["additionalProperties"] is False
    assert params["properties"]["p"]["anyOf"][0] == {"type": "integer", "minimum": 2,
                                                     "maximum": get_settings().limit_p}
    assert "auto" in params["properties"]["lam"]["anyOf"][1]["enum"]
    assert schemas["JobOut"]["properties"]["state"]["$ref"].endswith("/JobState")
    assert set(schemas["JobState"]["enum"]) == {"QUEUED", "RUNNING", "SUCCEEDED", "FAILED",
                                                "CANCELLING", "CANCELLED"}
    job = doc["paths"]["/jobs/{job_id}"]["get"]["responses"]["200"]["content"]
    job = job["application/json"]["schema"]  # a training or a batch prediction job
    assert job["discriminator"]["propertyName"] == "kind"
    assert set(job["discriminator"]["mapping"]) == {"train", "predict"}
    body = doc["paths"]["/train"]["post"]["requestBody"]["content"]["application/json"]
    assert len(body["examples"]) >= 3 and {"auto", "probabilities"} <= set(body["examples"])
    for example in body["examples"].values():  # every example is a valid request
        r = client.post("/train", json={**example["value"], "dataset_id": "no-such-dataset"})
        assert r.status_code in (404, 422), r.text
        assert r.status_code == 404 or r.json()["errors"][0]["field"] == "backend", r.text
    ops = [op["operationId"] for path in doc["paths"].values() for op in path.values()]
    assert len(ops) == len(set(ops)), ops
    assert set(ops) >= OPERATION_IDS, sorted(OPERATION_IDS - set(ops))
    assert doc["paths"]["/train"]["post"]["security"] == [{"bearer": []}]
    assert "bearer" in doc["components"]["securitySchemes"]


def test_generated_client_round_trips_a_training_job(api_server, tenant, heart, worker,
                                                     tmp_path):
    """openapi-python-client generates a package from the live document; it compiles and
    trains, polls and predicts through its typed models."""
    (tmp_path / "openapi.json").write_text(httpx.get(api_server + "/openapi.json").text)
    (tmp_path / "config.yaml").write_text("post_hooks: []\npackage_name_override: sodm_generated\n"
                                          "project_name_override: sodm-client\n")
    exe = Path(sys.executable).with_name("openapi-python-client")
    subprocess.run([str(exe), "generate", "--path", "openapi.json", "--config", "config.yaml",
                    "--meta", "none", "--output-path", "sodm_generated"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=120)
    assert compileall.compile_dir(tmp_path / "sodm_generated", quiet=1)
    sys.path.insert(0, str(tmp_path))
    try:
        _round_trip(api_server, tenant[1], heart["id"])
    finally:
        sys.path.remove(str(tmp_path))
        for mod in [m for m in sys.modules if m == "sodm_generated" or
                    m.startswith("sodm_generated.")]:
            del sys.modules[mod]


def _round_trip(base_url: str, key: str, dataset_id: str) -> None:
    client_mod = importlib.import_module("sodm_generated")
    models = importlib.import_module("sodm_generated.models")
    train = importlib.import_module("sodm_generated.api.jobs.train")
    get_job = importlib.import_module("sodm_generated.api.jobs.get_job")
    predict = importlib.import_module("sodm_generated.api.predict.predict")
    list_algorithms = importlib.import_module("sodm_generated.api.algorithms.list_algorithms")

    client = client_mod.AuthenticatedClient(base_url=base_url, token=key, timeout=60)
    algs = list_algorithms.sync(client=client)
    assert isinstance(algs, models.AlgorithmList) and len(algs.items) == 6
    body = models.SODMTrainRequest(
        dataset_id=dataset_id, algorithm="sodm", test_fraction=0.25, seed=3,
        name="generated-client",
        params=models.SODMParams(kernel=models.SODMParamsKernel.RBF, lam=100.0))
    job = train.sync(client=client, body=body)
    assert isinstance(job, models.JobOut), job
    assert job.state == models.JobState.QUEUED or job.state.value in ("RUNNING", "SUCCEEDED")
    deadline = time.monotonic() + 300
    while job.state.value not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, job
        time.sleep(0.3)
        job = get_job.sync(job.id, client=client)
    assert job.state == models.JobState.SUCCEEDED, job.error
    assert job.request["params"]["lam"] == 100.0
    out = predict.sync(client=client, body=models.PredictRequest(
        model="generated-client", instances=[[0.0] * 13, [0.5] * 13]))
    assert isinstance(out, models.PredictResponse), out
    assert len(out.labels) == 2 and out.model_id == job.model_id
    bad = train.sync(client=client, body=models.SODMTrainRequest(
        dataset_id=dataset_id, algorithm="sodm", params=models.SODMParams(n_jobs=10**6)))
    assert isinstance(bad, models.Problem) and bad.status == 422
    assert json.dumps(bad.to_dict()).count("SODM_LIMIT_N_JOBS") >= 1
