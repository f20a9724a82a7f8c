"""The same train/predict flow on the embedded defaults: ``sodm run`` with neither
DATABASE_URL nor CELERY_BROKER_URL (a SQLite file and kombu's SQLAlchemy transport under
SODM_DATA_DIR), its own uvicorn and celery worker processes; a worker killed mid-job is
restarted by ``sodm run`` while the API stays up, and the job finishes on its next attempt."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from solver import SODMClassifier
from tests.fixtures.stack import REPO_ROOT, free_port
from tests.service.jobs_helpers import SECONDS_ODM, load_libsvm, submit, upload, wait_job

PARAMS = {"kernel": "rbf", "lam": 10000.0, "gamma": "scale", "theta": 0.2}
SEED = 5


@dataclass
class Embedded:
    client: httpx.Client
    proc: subprocess.Popen
    log_path: Path  # sodm run's stderr: its own log lines and its children's

    def worker_main(self) -> psutil.Process:
        """The celery worker's main process (a direct child of sodm run)."""
        for p in psutil.Process(self.proc.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if "celery" in " ".join(p.cmdline()):
                    return p
        raise AssertionError("sodm run has no celery worker child")


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    """``sodm run`` on a fresh data directory; yields its client (with the printed key)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(SODM_DATA_DIR=str(tmp_path / "data"), SODM_CELERY_QUEUE="sodm-embedded",
               SODM_JOB_HEARTBEAT_SECONDS="0.5", SODM_JOB_LEASE_SECONDS="6",
               SODM_REAPER_INTERVAL_SECONDS="1", SODM_WORKER_HEARTBEAT_SECONDS="1")
    port = free_port()
    log = open(tmp_path / "run.log", "w+b")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run", "--port", str(port)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=log,
                            start_new_session=True)
    family: list[psutil.Process] = []
    try:
        key = None
        deadline = time.monotonic() + 120
        while key is None and time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            if not line and proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"sodm run exited: {log.read().decode()[-3000:]}")
            if line.startswith("API key: "):
                key = line.split(": ", 1)[1].strip()
        assert key, "sodm run printed no API key"
        family = psutil.Process(proc.pid).children(recursive=True)
        base = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=base, timeout=60,
                              headers={"Authorization": f"Bearer {key}"})
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if client.get("/livez").status_code == 200:
                    break
            time.sleep(0.3)
        while b" ready." not in (tmp_path / "run.log").read_bytes():  # the celery worker
            assert time.monotonic() < deadline, "the embedded worker did not start"
            time.sleep(0.3)
        yield Embedded(client, proc, tmp_path / "run.log")
        client.close()
    finally:
        family = family or psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGTERM)  # sodm run forwards it to the API and the worker
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
        for p in family:  # anything of ours still alive after the graceful stop
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        log.close()


def test_embedded_defaults_train_and_predict(embedded, datasets_dir):
    client = embedded.client
    ready = client.get("/readyz")  # the SQLite database and the SQLAlchemy broker
    assert ready.status_code == 200, ready.text
    train = upload(client, datasets_dir, "svmguide1")
    test = upload(client, datasets_dir, "svmguide1.t")
    job = submit(client, {"dataset_id": train["id"], "algorithm": "sodm", "params": PARAMS,
                          "test_dataset_id": test["id"], "seed": SEED})
    done = wait_job(client, job["id"], timeout=300)
    assert done["state"] == "SUCCEEDED", done["error"]

    X, y = load_libsvm(datasets_dir, "svmguide1")
    Xt, yt = load_libsvm(datasets_dir, "svmguide1.t", n_features=4)
    lib = SODMClassifier(**PARAMS, random_state=SEED).fit(X, y)
    r = client.post("/predict", json={"model_id": done["model_id"], "instances": Xt.tolist()})
    assert r.status_code == 200, r.text
    out = r.json()
    np.testing.assert_allclose(out["decision_values"], lib.decision_function(Xt), rtol=1e-9,
                               atol=1e-9)
    acc = float(np.mean(np.asarray(out["labels"]) == yt))
    assert acc == float(np.mean(lib.predict(Xt) == yt)) and acc > 0.9
    model = client.get(f"/models/{done['model_id']}").json()
    assert model["metrics"]["accuracy"] == pytest.approx(acc, abs=1e-12)


def test_a_killed_worker_is_restarted_and_the_api_stays_up(embedded, datasets_dir):
    client = embedded.client
    train = upload(client, datasets_dir, "svmguide1")
    job = submit(client, {"dataset_id": train["id"], "algorithm": "odm",
                          "params": SECONDS_ODM})
    wait_job(client, job["id"], {"RUNNING"}, timeout=120)
    first = embedded.worker_main()
    first.kill()  # SIGKILL of the worker's main process, mid-job (its pool child runs it)
    deadline = time.monotonic() + 120
    while b"worker killed by SIGKILL" not in embedded.log_path.read_bytes():
        assert time.monotonic() < deadline, embedded.log_path.read_text()[-3000:]
        time.sleep(0.2)
    assert client.get("/livez").status_code == 200  # the API never went down
    while True:  # a new worker process, its heartbeat live
        with contextlib.suppress(AssertionError):
            if embedded.worker_main().pid != first.pid and client.get("/workers").json()[
                    "live"] == 1:
                break
        assert time.monotonic() < deadline, "no new live worker"
        time.sleep(0.2)
    # the new worker's reaper re-queues the job once its lease expires; attempt 2 takes it
    again = wait_job(client, job["id"], {"RUNNING", "SUCCEEDED"}, timeout=120,
                     pred=lambda j: j["attempt"] == 2)
    if again["state"] == "RUNNING":  # no need to wait for the fit itself
        assert client.post(f"/jobs/{job['id']}/cancel").status_code in (200, 202)
        wait_job(client, job["id"], timeout=120)
    assert embedded.proc.poll() is None
