"""The quick start with Spark, as a new user runs it: ``SODM_SPARK_MASTER=local[2] make run``
(the install step taken as done) from a shell whose ``python3`` on PATH lacks the project's
packages. A ``backend: "spark"`` job succeeds, so Spark's Python workers ran the worker's
own interpreter, and predicts like the local backend's model."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from tests.fixtures.stack import REPO_ROOT, free_port
from tests.service.jobs_helpers import load_libsvm, submit, upload, wait_job
from tests.spark.helpers import local_fit

pytestmark = [pytest.mark.spark, pytest.mark.stack]

PARAMS = {"kernel": "rbf", "gamma": 0.5, "levels": 1, "n_strata": 4, "lam": 100.0,
          "theta": 0.2}  # all three given: nothing left to "auto"
SEED = 3
# what the quick start must not inherit from the test session
DROP = ("DATABASE_URL", "CELERY_BROKER_URL", "SODM_DATA_DIR", "SODM_CELERY_QUEUE",
        "SODM_SPARK_REMOTE", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")


@pytest.fixture
def quick_start(tmp_path: Path, python3_without_packages: Path) -> Iterator[httpx.Client]:
    """``make run`` with ``SODM_SPARK_MASTER=local[2]``; yields a client with its key."""
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    port = free_port()
    env.update(SODM_SPARK_MASTER="local[2]", SODM_DATA_DIR=str(tmp_path / "data"),
               SODM_PORT=str(port), SPARK_LOCAL_IP="127.0.0.1", PYTHONUNBUFFERED="1",
               PATH=f"{python3_without_packages}{os.pathsep}{os.environ['PATH']}")
    venv = Path(sys.prefix)
    log = open(tmp_path / "run.log", "w+b")  # noqa: SIM115 - closed below
    # -o: the venv is installed already (make would otherwise reinstall the spark lock)
    proc = subprocess.Popen(["make", "-s", "-o", f"{venv}/.installed-spark", "run",
                             f"VENV={venv}"], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    family: list[psutil.Process] = []
    try:
        key = None
        deadline = time.monotonic() + 180
        while key is None and time.monotonic() < deadline:
            line = proc.stdout.readline().decode()
            if not line and proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"make run exited: {log.read().decode()[-3000:]}")
            if line.startswith("API key: "):
                key = line.split(": ", 1)[1].strip()
        assert key, "make run printed no API key"
        family = psutil.Process(proc.pid).children(recursive=True)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60,
                              headers={"Authorization": f"Bearer {key}"})
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if client.get("/livez").status_code == 200:
                    break
            time.sleep(0.3)
        while b" ready." not in (tmp_path / "run.log").read_bytes():  # the celery worker
            assert time.monotonic() < deadline, "the quick start's worker did not start"
            time.sleep(0.3)
        yield client
        client.close()
    finally:
        family = family or psutil.Process(proc.pid).children(recursive=True)
        for p in psutil.Process(proc.pid).children():  # sodm run stops its own children
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        _, alive = psutil.wait_procs(family, timeout=30)
        for p in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        log.close()


def test_quick_start_trains_on_spark(quick_start: httpx.Client, datasets_dir: Path) -> None:
    client = quick_start
    heart = upload(client, datasets_dir, "heart_scale")
    job = submit(client, {"dataset_id": heart["id"], "backend": "spark", "params": PARAMS,
                          "seed": SEED, "test_dataset_id": heart["id"]})
    done = wait_job(client, job["id"], timeout=600)
    assert done["state"] == "SUCCEEDED", done["error"]
    assert all(h["backend"] == "spark" for h in done["history"])

    X, y = load_libsvm(datasets_dir, "heart_scale")
    local = local_fit(PARAMS, SEED, X, y)
    r = client.post("/predict", json={"model_id": done["model_id"], "instances": X.tolist()})
    assert r.status_code == 200, r.text
    f_spark, f_local = np.asarray(r.json()["decision_values"]), local.decision_function(X)
    assert np.max(np.abs(f_spark - f_local)) <= 1e-6 * np.max(np.abs(f_local))
