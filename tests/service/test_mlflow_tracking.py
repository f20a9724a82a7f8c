"""Training jobs as MLflow runs, against a real ``mlflow server`` (SQLite backend store)
started here: with ``MLFLOW_TRACKING_URI`` set, a job's run has its parameters (the "auto"
ones resolved), metrics, the CV table and the margin histogram, and the ONNX model
registered under the model's name (alias ``sodm_v<version>``), which onnxruntime runs to
``/predict``'s decision values; a cancelled job is a KILLED run; MLflow down leaves the job
as fast and as SUCCEEDED as without it; unset, ``mlflow`` is never imported."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.fixtures.services import free_port
from tests.service.jobs_helpers import LONG_ODM, load_libsvm, submit, upload, wait_job

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mlflow_url(tmp_path_factory):
    """``mlflow server`` on a free port: SQLite backend store, local artifact store."""
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(tmp / "mlflow.log", "ab")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
         "--artifacts-destination", str(tmp / "artifacts"), "--workers", "1"],
        cwd=tmp, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp / "mlflow.log").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, (tmp / "mlflow.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # our own session only
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        log.close()


def _run_of(client, job_id: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        runs = client.search_runs(
            [e.experiment_id for e in client.search_experiments()],
            filter_string=f"tags.`sodm.job_id` = '{job_id}'")
        if runs and runs[0].info.status != "RUNNING":
            return runs[0]
        assert time.monotonic() < deadline, f"no MLflow run of job {job_id}"
        time.sleep(0.5)


def test_training_jobs_become_mlflow_runs(mlflow_url, start_worker, client, datasets_dir):
    from mlflow import MlflowClient

    start_worker(MLFLOW_TRACKING_URI=mlflow_url)
    ds = upload(client, datasets_dir, "heart_scale")
    job = wait_job(client, submit(client, {"dataset_id": ds["id"], "algorithm": "sodm",
                                           "params": {"kernel": "rbf"}, "seed": 7,
                                           "test_fraction": 0.2, "name": "tracked"})["id"])
    assert job["state"] == "SUCCEEDED", job["error"]
    model = client.get(f"/models/{job['model_id']}").json()
    mlf = MlflowClient(mlflow_url)
    run = _run_of(mlf, job["id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["sodm.algorithm"] == "sodm"
    params = run.data.params
    for name in ("lam", "gamma", "theta"):  # asked "auto", logged as the values chosen
        assert float(params[f"params.{name}"]) == pytest.approx(model["params"][name])
    assert params["auto"] == '["gamma", "lam", "theta"]'
    assert run.data.metrics["accuracy"] == pytest.approx(model["metrics"]["accuracy"])
    assert run.data.metrics["n_support_vectors"] == model["n_support_vectors"]
    files = {f.path for f in mlf.list_artifacts(run.info.run_id)} | {
        f.path for d in ("auto", "margin") for f in mlf.list_artifacts(run.info.run_id, d)}
    assert {"auto/cv_table.json", "margin/histogram.json", "margin/stats.json"} <= files
    import mlflow

    mlflow.set_tracking_uri(mlflow_url)
    table = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/auto/cv_table.json")
    assert table["cv_table"] == model["fit_info"]["auto"]["cv_table"]
    histogram = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/margin/histogram.json")
    assert histogram == model["margin"]["histogram"]

    version = mlf.get_model_version_by_alias("tracked", f"sodm_v{model['version']}")
    assert version.tags["sodm.model_id"] == model["id"] and version.run_id == run.info.run_id
    import onnxruntime as ort

    graph = mlflow.onnx.load_model(f"models:/tracked@sodm_v{model['version']}")
    X, _ = load_libsvm(datasets_dir, "heart_scale", n_features=13)
    expected = client.post("/predict", json={"model_id": model["id"],
                                             "instances": X[:20].tolist()}).json()
    session = ort.InferenceSession(graph.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["decision_function"], {"X": X[:20]})[0],
                               expected["decision_values"], rtol=1e-9, atol=1e-12)


def test_a_cancelled_job_is_a_killed_run(mlflow_url, start_worker, client, datasets_dir):
    from mlflow import MlflowClient

    start_worker(MLFLOW_TRACKING_URI=mlflow_url)
    ds = upload(client, datasets_dir, "svmguide1")
    job = submit(client, {"dataset_id": ds["id"], "algorithm": "odm", "params": LONG_ODM,
                          "name": "cancelled"})
    wait_job(client, job["id"], {"RUNNING"})
    assert client.post(f"/jobs/{job['id']}/cancel").status_code in (200, 202)
    assert wait_job(client, job["id"])["state"] == "CANCELLED"
    run = _run_of(MlflowClient(mlflow_url), job["id"])
    assert run.info.status == "KILLED"
    assert float(run.data.params["params.lam"]) == LONG_ODM["lam"]


def test_mlflow_down_costs_the_job_nothing(start_worker, client, datasets_dir):
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    w = start_worker(MLFLOW_TRACKING_URI=closed)
    ds = upload(client, datasets_dir, "heart_scale")
    job = wait_job(client, submit(client, {
        "dataset_id": ds["id"], "algorithm": "odm", "name": "untracked",
        "params": {"kernel": "rbf", "gamma": 0.1, "lam": 10.0, "theta": 0.3}})["id"])
    assert job["state"] == "SUCCEEDED", job["error"]
    w.wait_log(rf"job {job['id']}: MLflow run not logged \(", timeout=120)
    # the next job runs at once: the failed run was off the job's thread
    second = wait_job(client, submit(client, {
        "dataset_id": ds["id"], "algorithm": "odm", "name": "untracked",
        "params": {"kernel": "rbf", "gamma": 0.1, "lam": 10.0, "theta": 0.3}})["id"])
    assert second["state"] == "SUCCEEDED"


def test_without_the_variable_mlflow_is_never_imported(stack_env):
    """The worker's modules, and the hook a job's end calls, with MLFLOW_TRACKING_URI
    unset: no ``mlflow`` module is loaded."""
    code = ("import sys, worker.tasks, worker.celery_app, worker.runner\n"
            "from worker import mlflow_tracking\n"
            "mlflow_tracking.job_ended('some-job')\n"
            "mlflow_tracking.drain(1)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))\n")
    env = {k: v for k, v in {**os.environ, **stack_env}.items() if k != "MLFLOW_TRACKING_URI"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_pyspark_is_whole_before_the_mlflow_thread_starts() -> None:
    """MLflow imports pyspark lazily on its thread while a Spark job may import it on the
    job's thread (a partially initialised ``pyspark.sql``, a failed job): ``job_ended``
    imports it on the caller's thread before it starts the MLflow thread."""
    code = ("import sys, threading\n"
            "from worker import mlflow_tracking as m\n"
            "seen, start = [], threading.Thread.start\n"
            "def spy(self):\n"
            "    seen.append('pyspark.sql' in sys.modules)\n"
            "    start(self)\n"
            "threading.Thread.start = spy\n"
            "assert 'pyspark' not in sys.modules\n"
            "m.job_ended('00000000-0000-0000-0000-000000000000')\n"
            "print(seen)\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "[True]"
