"""The Spark backend end to end on the real stack: uvicorn + a real Celery worker pointed at the
Spark Connect server (``SODM_SPARK_REMOTE``), Postgres and Redis.

* ``POST /train`` with ``backend: "spark"`` ends SUCCEEDED with the local backend's model and
  held-out metrics (same params, seed and ``test_fraction``), for two classes and three
  (one-vs-rest), on a classic local[2] session and on Connect;
* ``POST /jobs/{id}/cancel`` of a running Spark job ends CANCELLED and leaves no Spark job
  running on the server (read from the server's monitoring REST API, by session tag);
* a pool child SIGKILLed mid-training leaves its Spark operation running on the server; the
  worker's reaper / the retry interrupts it within seconds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest

from tests.fixtures.stack import _start
from tests.fixtures.worker import WorkerProcess, _Starter
from tests.service.jobs_helpers import libsvm_bytes, load_libsvm, submit, upload_as, wait_job
from tests.spark.helpers import (
    CLASSES,
    ONE_BLAS_THREAD,
    assert_same_model,
    three_classes,
    upload_three_classes,
)
from worker.spark.spark_backend import session_id_for

pytestmark = pytest.mark.spark

SEED = 11
# numeric gamma: the Spark run repeats the local arithmetic (decision values within 1e-6);
# every searched parameter given (test_auto_parameters_on_spark_give_the_local_model leaves
# them to "auto")
SPARK_PARAMS = {"kernel": "rbf", "gamma": 0.5, "levels": 2, "n_strata": 6, "lam": 100.0,
                "theta": 0.2}
# One Spark operation (levels=0: one global solve) that runs for many minutes unless it is
# interrupted: a tolerance the solver never reaches on svmguide1 and a large epoch budget.
LONG_SPARK = {"kernel": "rbf", "gamma": 10.0, "lam": 1e8, "theta": 0.2, "tol": 1e-12,
              "max_iter": 100_000, "levels": 0}


@pytest.fixture(scope="module")
def spark_api(spark_connect_server: str, stack_env: dict[str, str],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An API process that accepts ``backend: "spark"`` (Spark Connect configured)."""
    server = _start(stack_env, tmp_path_factory.mktemp("api-spark"),
                    {"SODM_SPARK_REMOTE": str(spark_connect_server)})
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def spark_worker(spark_connect_server: str, stack_env: dict[str, str],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """A Celery worker (one pool child) whose Spark backend is Connect. Its lease (15 s)
    leaves a clear window in which a dead child's Spark job is seen still running. Its
    local jobs run BLAS on one thread, as Spark's Python workers do (``ONE_BLAS_THREAD``)."""
    starter = _Starter(stack_env, tmp_path_factory)
    try:
        yield starter(SODM_SPARK_REMOTE=str(spark_connect_server),
                      SODM_JOB_LEASE_SECONDS="15", **ONE_BLAS_THREAD)
    finally:
        starter.close()


@pytest.fixture
def sclient(spark_api: str, tenant: tuple[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=spark_api, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        yield c


@pytest.fixture(scope="module")
def heart(spark_api: str, tenant, datasets_dir: Path) -> dict[str, Any]:
    return upload_as(spark_api, tenant, datasets_dir, "heart_scale")


@pytest.fixture(scope="module")
def guide(spark_api: str, tenant, datasets_dir: Path) -> dict[str, Any]:
    return upload_as(spark_api, tenant, datasets_dir, "svmguide1")


def _running_spark_jobs(ui_url: str, session_id: str) -> list[int] | None:
    """Ids of the running Spark jobs of the Connect session ``session_id`` (Connect tags
    every job with the session id), or None when the monitoring API did not answer (the
    server's JVM can be slow to reply on a loaded machine)."""
    try:
        apps = httpx.get(f"{ui_url}/api/v1/applications", timeout=30).json()
        out: list[int] = []
        for app in apps:
            jobs = httpx.get(f"{ui_url}/api/v1/applications/{app['id']}/jobs",
                             params={"status": "running"}, timeout=30).json()
            out += [j["jobId"] for j in jobs
                    if any(session_id in t for t in j.get("jobTags", []))]
        return out
    except httpx.HTTPError:
        return None


def _wait_running(ui_url: str, session_id: str, running: bool, timeout: float, what: str
                  ) -> float:
    """Poll until the session has (``running``) / has no running Spark job; returns the
    seconds it took (an unanswered poll counts as neither)."""
    t0 = time.monotonic()
    while True:
        jobs = _running_spark_jobs(ui_url, session_id)
        if jobs is not None and bool(jobs) == running:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {jobs})")
        time.sleep(0.5)


def _wait_long_job(ui_url: str, session_id: str, timeout: float, what: str,
                   min_seconds: float = 3.0) -> None:
    """Poll until one Spark job of the session has been seen running for ``min_seconds``
    (the global solve, not one of the short jobs before it)."""
    t0 = time.monotonic()
    first_seen: dict[int, float] = {}
    while time.monotonic() - t0 < timeout:
        jobs = _running_spark_jobs(ui_url, session_id)
        now = time.monotonic()
        if jobs is not None:
            first_seen = {j: first_seen.get(j, now) for j in jobs}
            if any(now - t >= min_seconds for t in first_seen.values()):
                return
        time.sleep(0.5)
    raise AssertionError(f"{what}: no long Spark job within {timeout:.0f} s")


@pytest.fixture(scope="module")
def three(spark_api: str, tenant, datasets_dir: Path) -> dict[str, Any]:
    with httpx.Client(base_url=spark_api, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        return upload_three_classes(c, datasets_dir)


def _both_backends(client: httpx.Client, body: dict[str, Any]) -> tuple[dict, dict]:
    """The same request on Spark and locally, both SUCCEEDED."""
    spark_job = submit(client, {**body, "backend": "spark", "name": "on-spark"})
    local_job = submit(client, {**body, "name": "on-local"})
    done = [wait_job(client, j["id"], timeout=600) for j in (spark_job, local_job)]
    for d in done:
        assert d["state"] == "SUCCEEDED", d["error"]
    return done[0], done[1]


def test_classic_master_worker_trains_and_leaves_no_jvm(sclient, start_worker, three,
                                                        datasets_dir):
    """``SODM_SPARK_MASTER`` (classic local[2]): a three-class request gives the local
    backend's model (one-vs-rest, each problem its Spark jobs); the driver JVM lives in the
    worker's pool child and stopping the worker leaves no JVM behind. Runs before the
    Connect worker exists, so this worker is the only consumer of the queue (it runs the
    local job too)."""
    w = start_worker(SODM_SPARK_MASTER="local[2]", SPARK_LOCAL_IP="127.0.0.1",
                     **ONE_BLAS_THREAD)
    params = {**SPARK_PARAMS, "levels": 1}
    done, local = _both_backends(sclient, {"dataset_id": three["id"], "params": params,
                                           "seed": SEED})
    assert [(h["problem"], h["level"]) for h in done["history"]] == [(0, 1), (1, 1), (2, 1)]
    X, _ = three_classes(datasets_dir)
    model = assert_same_model(sclient, done, local, X)
    assert model["classes"] == list(CLASSES)
    jvms = [p for c in w.children() for p in c.children(recursive=True)
            if "java" in p.name()]
    assert jvms, "the classic session's JVM runs under the pool child"
    w.stop()
    gone, alive = psutil.wait_procs(jvms, timeout=30)
    assert not alive, f"JVMs left after the worker stopped: {alive}"


def test_standalone_cluster_trains_like_local(sclient, start_worker, spark_standalone, heart,
                                              datasets_dir):
    """``SODM_SPARK_MASTER=spark://...`` (a standalone master and two 1-core workers, the
    compose profile's layout): a grid search gives the local backend's model and the local
    folds' scores, the executors running in the cluster's JVMs. One binary request: the
    classic session's one-vs-rest is the classic master test's, the cluster only changes
    where the executors run. Before the Connect worker exists, so this worker is the only
    consumer of the queue."""
    w = start_worker(SODM_SPARK_MASTER=spark_standalone, SPARK_LOCAL_IP="127.0.0.1",
                     **ONE_BLAS_THREAD)
    try:
        body = {"dataset_id": heart["id"], "params": {**SPARK_PARAMS, "levels": 1},
                "seed": SEED, "test_fraction": 0.25,
                "search": {"grid": {"theta": [0.2, 0.5]}, "folds": 2}}
        done, local = _both_backends(sclient, body)
        assert all(h["backend"] == "spark" for h in done["history"])
        # a standalone master names its applications app-<time>-<n> (local mode: local-)
        spark = done["progress"]["spark"]
        assert spark["mode"] == "classic", spark
        assert spark["application_id"].startswith("app-"), spark
        X, _ = load_libsvm(datasets_dir, "heart_scale", heart["n_features"])
        model = assert_same_model(sclient, done, local, X)
        assert len(model["classes"]) == 2
        # the folds scored what the local backend's folds scored
        ml = sclient.get(f"/models/{local['model_id']}").json()
        assert len(model["metrics"]["search"]["results"]) == 2
        assert model["metrics"]["search"]["results"] == ml["metrics"]["search"]["results"]
    finally:
        w.stop()


def test_spark_job_predicts_like_local_backend(sclient, spark_worker, heart, datasets_dir):
    # test_fraction: Spark holds out exactly the local backend's rows (same seed), so one
    # request gives the same model and the same held-out metrics on both backends
    body = {"dataset_id": heart["id"], "algorithm": "sodm", "params": SPARK_PARAMS,
            "seed": SEED, "test_fraction": 0.25}
    wrong = sclient.post("/train", json={**body, "backend": "spark", "algorithm": "odm",
                                         "params": {}})
    assert wrong.status_code == 422
    assert wrong.headers["content-type"].startswith("application/problem+json")
    assert wrong.json()["errors"][0]["field"] == "algorithm"
    done, local = _both_backends(sclient, body)
    assert [h["level"] for h in done["history"]] == [2, 1]
    assert all(h["backend"] == "spark" for h in done["history"])
    X, y = load_libsvm(datasets_dir, "heart_scale", heart["n_features"])
    model = assert_same_model(sclient, done, local, X)
    assert model["metrics"]["n_test"] == 68 and model["metrics"]["accuracy"] > 0.7


def test_auto_parameters_on_spark_give_the_local_model(sclient, spark_worker, heart,
                                                       datasets_dir):
    """lam "auto", gamma and theta left out: both backends choose them by the same search on
    the same training rows (test_fraction's split), and Spark fits the local model."""
    params = {k: v for k, v in SPARK_PARAMS.items() if k not in ("gamma", "theta")}
    body = {"dataset_id": heart["id"], "params": {**params, "lam": "auto"}, "seed": SEED,
            "test_fraction": 0.25}
    done, local = _both_backends(sclient, body)
    assert done["params"]["theta"] == "auto" and done["backend"] == "spark"
    X, _ = load_libsvm(datasets_dir, "heart_scale", heart["n_features"])
    model = assert_same_model(sclient, done, local, X)
    ml = sclient.get(f"/models/{local['model_id']}").json()
    sa, la = model["fit_info"]["auto"], ml["fit_info"]["auto"]
    assert sa["chosen"] == la["chosen"] and sa["auto"] == ["lam", "gamma", "theta"]
    assert [r["mean_accuracy"] for r in sa["cv_table"]] == \
        [r["mean_accuracy"] for r in la["cv_table"]]
    assert sa["final_fit_cpu_seconds"] >= 0 and "within_budget" in sa
    assert {k: model["params"][k] for k in ("lam", "gamma", "theta")} == la["chosen"]


def test_weights_on_spark_give_the_local_model(sclient, spark_worker, datasets_dir):
    """weight_column (a CSV column) and class_weight, with lam "auto": Spark takes the
    column out of the features, leaves out the rows of weight 0, weights its search, its
    fit and its held-out metrics as the local backend does, and fits the local model."""
    from tests.service.jobs_helpers import HEART_NAMES
    from tests.service.test_weights import _csv, _upload

    X, y = load_libsvm(datasets_dir, "heart_scale", 13)
    w = np.random.default_rng(0).integers(0, 4, size=len(y)).astype(float)
    ds = _upload(sclient, "heart-w.csv", _csv(X, y, w))
    body = {"dataset_id": ds, "params": {**SPARK_PARAMS, "lam": "auto"}, "seed": SEED,
            "test_fraction": 0.25, "weight_column": "w", "class_weight": "balanced"}
    done, local = _both_backends(sclient, body)
    model = assert_same_model(sclient, done, local, X)
    ml = sclient.get(f"/models/{local['model_id']}").json()
    assert model["feature_names"] == ml["feature_names"] == HEART_NAMES
    assert model["fit_info"]["n_train"] == ml["fit_info"]["n_train"] < 202
    sa, la = model["fit_info"]["auto"], ml["fit_info"]["auto"]
    assert sa["cv_score"] == la["cv_score"] == "balanced_accuracy"
    assert sa["chosen"] == pytest.approx(la["chosen"], rel=1e-9)
    assert model["fit_info"]["weights"]["sum"] == pytest.approx(
        ml["fit_info"]["weights"]["sum"], rel=1e-12)
    # the held-out rows' weights reach the metrics on both backends
    wm, wl = model["metrics"]["weighted"], ml["metrics"]["weighted"]
    assert wm["weight_sum"] == wl["weight_sum"] > 0 and wm["n_weighted"] == wl["n_weighted"]
    assert wm["accuracy"] == pytest.approx(wl["accuracy"], abs=1e-12)


def test_multiclass_on_connect(sclient, spark_worker, three, datasets_dir):
    done, local = _both_backends(sclient, {"dataset_id": three["id"], "seed": SEED,
                                           "params": SPARK_PARAMS})
    assert [(h["problem"], h["level"]) for h in done["history"]] == \
        [(k, lvl) for k in range(3) for lvl in (2, 1)]
    X, _ = three_classes(datasets_dir)
    assert_same_model(sclient, done, local, X)


def test_cancel_stops_the_spark_work(sclient, spark_worker, guide, spark_connect_server):
    job = submit(sclient, {"dataset_id": guide["id"], "backend": "spark",
                           "params": LONG_SPARK, "seed": SEED, "name": "guide-cancel"})
    sid = session_id_for(job["id"], 1)
    ui = spark_connect_server.ui_url
    _wait_long_job(ui, sid, 300, "the global solve runs on Spark")

    r = sclient.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code == 202, r.text
    done = wait_job(sclient, job["id"], timeout=120)
    assert done["state"] == "CANCELLED" and done["model_id"] is None
    _wait_running(ui, sid, False, 30, "Spark job stopped")
    assert spark_worker.proc.poll() is None and len(spark_worker.children()) == 1


def test_cancel_reaches_a_later_one_vs_rest_problem(sclient, spark_worker, datasets_dir,
                                                    spark_connect_server):
    """Three classes: the cancel comes while the second problem's Spark solve runs (the
    first one's records are in), and stops that solve; no third problem starts."""
    three_guide = upload_three_classes(sclient, datasets_dir, "svmguide1")
    # a bounded version of LONG_SPARK: each one-vs-rest problem is one global solve of
    # max_iter epochs (the tolerance is never reached), about 30 s each here
    params = {**LONG_SPARK, "max_iter": 4000}
    job = submit(sclient, {"dataset_id": three_guide["id"], "backend": "spark",
                           "params": params, "seed": SEED, "name": "three-cancel"})
    deadline = time.monotonic() + 600
    while True:  # the first problem's solve reported its end: the second one runs
        cur = sclient.get(f"/jobs/{job['id']}").json()
        if "(1/3)" in cur["progress"]["message"] or cur["state"] not in (
                "QUEUED", "RUNNING") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert cur["state"] == "RUNNING" and "(1/3)" in cur["progress"]["message"], cur
    sid = session_id_for(job["id"], 1)
    ui = spark_connect_server.ui_url
    _wait_long_job(ui, sid, 300, "the second problem's solve runs on Spark")
    assert sclient.post(f"/jobs/{job['id']}/cancel").status_code == 202
    done = wait_job(sclient, job["id"], timeout=120)
    assert done["state"] == "CANCELLED" and done["model_id"] is None
    assert "(3/3)" not in done["progress"]["message"]
    _wait_running(ui, sid, False, 30, "Spark job stopped")


def test_killed_worker_spark_work_is_interrupted(sclient, spark_worker, guide,
                                                 spark_connect_server):
    """The pool child dies mid-operation: the server would keep running the attempt's Spark
    job, but the worker releases the dead child's lease at once (worker/lifecycle/child_loss.py) and
    the retry interrupts attempt 1's session before its own solve."""
    job = submit(sclient, {"dataset_id": guide["id"], "backend": "spark",
                           "params": LONG_SPARK, "seed": SEED, "name": "guide-killed"})
    ui = spark_connect_server.ui_url
    first = session_id_for(job["id"], 1)
    # 20 s: longer than any of the short jobs before the solve take even on a loaded
    # machine (their Python workers can need seconds to start), far shorter than the solve
    _wait_long_job(ui, first, 300, "attempt 1 runs the global solve", min_seconds=20)
    (child,) = spark_worker.children()
    os.kill(child.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    # the client is gone; how long the server still runs its operation depends on when the
    # retry starts (seconds): only that it stops is asserted
    _wait_running(ui, first, False, 120, "the orphaned Spark job interrupted")
    assert time.monotonic() - killed_at < 120
    # the retry runs as attempt 2 in its own session; cancel it to end the test
    second = session_id_for(job["id"], 2)
    _wait_running(ui, second, True, 300, "attempt 2 runs on Spark")
    assert sclient.post(f"/jobs/{job['id']}/cancel").status_code == 202
    done = wait_job(sclient, job["id"], timeout=120)
    assert done["state"] == "CANCELLED" and done["attempt"] == 2
    _wait_running(ui, second, False, 30, "attempt 2 stopped")


def _break_features(data_file: Path) -> None:
    """Overwrite the page header of the first feature column's first chunk with garbage:
    the footer and the labels still read, so only a reader of the features fails."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(data_file).metadata
    names = [meta.schema.column(j).name for j in range(meta.num_columns)]
    column = next(n for n in names if n not in ("row_id", "label"))
    chunk = meta.row_group(0).column(names.index(column))
    with open(data_file, "r+b") as fh:
        fh.seek(chunk.data_page_offset)
        fh.write(b"\xff" * 32)


def test_spark_side_failure_is_a_short_problem(sclient, spark_worker, heart, datasets_dir,
                                               stack_env):
    """A feature column that Spark cannot decode (the worker itself reads only the labels):
    the job ends FAILED ``spark-failed`` with one line naming the Spark stage and what the job
    was doing, no traceback or path; the traceback is in the worker's log."""
    text = libsvm_bytes(datasets_dir, "heart_scale").decode()
    r = sclient.post("/datasets", data={"format": "libsvm", "name": "heart-broken"},
                     files={"file": ("heart-broken.libsvm",
                                     "".join(text.splitlines(keepends=True)[:-1]))})
    assert r.status_code == 201, r.text
    bad = r.json()
    data_file = Path(stack_env["SODM_DATA_DIR"]) / "datasets" / bad["id"] / "data.parquet"
    _break_features(data_file)
    before = len(spark_worker.log_text())
    job = submit(sclient, {"dataset_id": bad["id"], "algorithm": "sodm", "backend": "spark",
                           "params": SPARK_PARAMS, "seed": SEED,
                           "test_dataset_id": heart["id"]})
    done = wait_job(sclient, job["id"], timeout=300)
    assert done["state"] == "FAILED", done
    err = done["error"]
    assert err["type"].endswith("/spark-failed"), err
    detail = err["detail"]
    assert detail.startswith("Spark job failed") and " while " in detail, detail
    assert "\n" not in detail and len(detail) <= 600, detail
    assert "Traceback" not in detail and stack_env["SODM_DATA_DIR"] not in detail, detail
    assert done["attempt"] == 1 and done["model_id"] is None
    log = spark_worker.log_text()[before:]
    assert f"job {job['id']}: Spark failed" in log and "Traceback" in log
