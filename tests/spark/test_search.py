"""Grid search with k-fold CV on the Spark backend, through the service (uvicorn + a real
Celery worker whose classic session is ``local[2]``, Postgres, Redis).

* the same request with ``search`` on Spark and locally: the same folds, the same fold
  accuracies, the same chosen point and the same final model (decision values within 1e-6
  relative, numeric gamma);
* ``POST /jobs/{id}/cancel`` during a search's Spark fit ends CANCELLED within seconds and
  the worker's next Spark job runs at once (the cancelled Spark jobs were stopped).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.worker import WorkerProcess
from tests.service.jobs_helpers import load_libsvm, submit, upload_as, wait_job
from tests.spark.helpers import ONE_BLAS_THREAD, assert_same_model

pytestmark = pytest.mark.spark

SEED = 5
PARAMS = {"kernel": "rbf", "gamma": 0.5, "levels": 1, "n_strata": 4}
GRID = {"lam": [10.0, 1000.0]}
# on svmguide1, a fit that runs for many minutes unless interrupted (one global solve)
LONG = {"kernel": "rbf", "gamma": 10.0, "lam": 1e8, "tol": 1e-12, "max_iter": 100_000,
        "levels": 0}
LOCAL2 = {"SODM_SPARK_MASTER": "local[2]", "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="module")
def api(start_api_module) -> str:
    """An API process that accepts ``backend: "spark"`` (a classic master configured)."""
    return start_api_module(**LOCAL2).url


@pytest.fixture(scope="module")
def spark_worker(start_worker_module) -> WorkerProcess:
    """The module's only worker: it runs the Spark jobs and their local twins."""
    return start_worker_module(SODM_JOB_LEASE_SECONDS="15", **LOCAL2, **ONE_BLAS_THREAD)


@pytest.fixture
def sclient(api: str, tenant: tuple[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        yield c


@pytest.fixture(scope="module")
def heart(api: str, tenant, datasets_dir: Path) -> dict[str, Any]:
    return upload_as(api, tenant, datasets_dir, "heart_scale")


@pytest.mark.timeout(1800)  # a 2-core machine shared with a benchmark: minutes per Spark fit
def test_search_on_spark_equals_local(sclient, spark_worker, heart, datasets_dir):
    body = {"dataset_id": heart["id"], "params": PARAMS, "seed": SEED,
            "test_fraction": 0.25, "search": {"grid": GRID, "folds": 2}}
    # what still differs is refused, naming the field
    r = sclient.post("/train", json={**body, "backend": "spark",
                                     "params": {**PARAMS, "theta": "auto"}})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "params.theta"
    spark_job = submit(sclient, {**body, "backend": "spark", "name": "search-spark"})
    local_job = submit(sclient, {**body, "name": "search-local"})
    done, local = (wait_job(sclient, j["id"], timeout=1500) for j in (spark_job, local_job))
    assert done["state"] == "SUCCEEDED", done["error"]
    assert local["state"] == "SUCCEEDED", local["error"]
    X, _ = load_libsvm(datasets_dir, "heart_scale", heart["n_features"])
    model = assert_same_model(sclient, done, local, X)
    ml = sclient.get(f"/models/{local['model_id']}").json()
    ss, sl = model["metrics"]["search"], ml["metrics"]["search"]
    assert len(ss["results"]) == 2 and all(len(r["fold_accuracy"]) == 2
                                           for r in ss["results"])
    # every fold's Spark fit scores exactly what the local fold's fit scores
    assert [r["fold_accuracy"] for r in ss["results"]] == \
        [r["fold_accuracy"] for r in sl["results"]]
    assert ss["best_params"] == sl["best_params"]
    assert model["params"]["lam"] == ss["best_params"]["lam"]
    spark = done["progress"]["spark"]  # the last sample stays: every stage done
    assert spark["mode"] == "classic" and spark["stages_done"] > 0
    assert local["progress"]["spark"] is None


@pytest.fixture(scope="module")
def guide(api: str, tenant, datasets_dir: Path) -> dict[str, Any]:
    return upload_as(api, tenant, datasets_dir, "svmguide1")


@pytest.mark.timeout(1800)
def test_cancel_reaches_a_running_search(sclient, spark_worker, heart, guide):
    job = submit(sclient, {"dataset_id": guide["id"], "backend": "spark", "seed": SEED,
                           "params": LONG, "name": "search-cancel",
                           "search": {"grid": {"theta": [0.1, 0.3]}, "folds": 3}})
    deadline = time.monotonic() + 300
    while True:  # the first fold's Spark fit is under way
        cur = sclient.get(f"/jobs/{job['id']}").json()
        if cur["state"] == "RUNNING" and "grid search" in cur["progress"]["message"] \
                or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert cur["state"] == "RUNNING", cur
    # GET /jobs/{id} tells the Spark application and the running stage's tasks
    seen: list[dict] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(s and s["stage_id"] is not None
                                                   for s in seen):
        cur = sclient.get(f"/jobs/{job['id']}").json()
        seen.append(cur["progress"]["spark"])
        time.sleep(1.0)
    spark = seen[-1]
    assert spark["mode"] == "classic" and spark["application_id"].startswith("local-")
    assert spark["stage_id"] is not None and 0 <= spark["tasks_done"] <= spark["tasks_total"]
    assert spark["tasks_total"] >= 1 and spark["stages_done"] >= 1
    assert cur["progress"]["fraction"] < 0.1
    t0 = time.monotonic()
    assert sclient.post(f"/jobs/{job['id']}/cancel").status_code == 202
    done = wait_job(sclient, job["id"], timeout=120)
    assert done["state"] == "CANCELLED" and done["model_id"] is None
    assert time.monotonic() - t0 < 60
    # the worker is free: a short Spark job right after it succeeds
    quick = submit(sclient, {"dataset_id": heart["id"], "backend": "spark", "seed": SEED,
                             "params": PARAMS, "name": "after-cancel"})
    assert wait_job(sclient, quick["id"], timeout=300)["state"] == "SUCCEEDED"
