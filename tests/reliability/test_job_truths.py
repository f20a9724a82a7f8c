"""Job engine truths of issue 14 on the real stack: job problems carry no traceback, path or
library internals; a model file whose bytes do not match its stored sha256 is refused; the
sweep removes orphan model files and stale temporary files and keeps live ones."""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from tests.service.jobs_helpers import submit, upload_as, wait_job

LEAKS = re.compile(r"Traceback|File \"|/[\w.-]+/[\w.-]+|Error:|\bat org\.|0x[0-9a-f]{6}")


@pytest.fixture(scope="module")
def trained(api_server, tenant, datasets_dir, worker) -> dict:
    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        done = wait_job(c, submit(c, {"dataset_id": ds["id"], "algorithm": "sodm",
                                      "params": {"kernel": "linear"}})["id"])
        assert done["state"] == "SUCCEEDED", done["error"]
        return {"dataset": ds, "job": done, "model": c.get(f"/models/{done['model_id']}").json()}


def test_failed_job_problem_leaks_nothing(client, api_server, tenant, datasets_dir, worker,
                                          stack_env, db):
    """A dataset whose files vanished under the worker (an unexpected OSError naming the
    path): FAILED with a problem that names no path, exception type or traceback. A stored
    problem written before the worker scrubbed details (a Spark worker traceback) is
    scrubbed on the way out of GET /jobs/{id}."""
    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    shutil.rmtree(Path(stack_env["SODM_DATA_DIR"]) / "datasets" / ds["id"])
    job = submit(client, {"dataset_id": ds["id"], "algorithm": "sodm",
                          "params": {"kernel": "linear"}})
    done = wait_job(client, job["id"], {"FAILED"}, timeout=300)
    detail = done["error"]["detail"]
    assert done["error"]["type"].endswith("/training-failed")
    assert not LEAKS.search(detail) and ds["id"] not in detail, detail
    assert "FileNotFoundError" not in detail and "internal error" in detail

    spark_tb = (
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/pyspark/worker.py", line 1247, in main\n'
        "    process()\n"
        '  File "/srv/sodm/solver/spark/kernel_sodm.py", line 88, in _fit_partition\n'
        "ValueError: partition 3 of /data/sodm/datasets/x/data.parquet has one class\n"
        "\tat org.apache.spark.api.python.BasePythonRunner(PythonRunner.scala:572)\n")
    with db.begin() as conn:
        conn.execute(text("update jobs set error = cast(:e as jsonb) where id = :j"),
                     {"e": '{"type": "https://sodm.dev/problems/training-failed", "title": '
                           '"Training failed", "status": 500, "detail": '
                           + __import__("json").dumps(spark_tb) + "}", "j": job["id"]})
    shown = client.get(f"/jobs/{job['id']}").json()["error"]["detail"]
    assert shown.startswith("partition 3 of <path> has one class"), shown
    assert not LEAKS.search(shown), shown


def test_model_file_sha_mismatch_is_refused(trained, start_api, tenant, datasets_dir):
    """One flipped byte in a model's stored bytes: a fresh API process refuses to load it
    (500 problem model-file-corrupt) for /predict, and so do the file download and the ONNX
    export (with no local copy cached); restoring the bytes makes it load again."""
    from app.core.config import get_settings
    from app.services.model_registry import model_store
    from tests.fixtures.model_blobs import replaced_bytes, stored_bytes

    model = trained["model"]
    for copy in (Path(get_settings().data_dir) / model_store.CACHE_DIR).glob(
            f"{model['id']}.*"):
        copy.unlink()
    broken = bytearray(stored_bytes(model["id"]))
    broken[len(broken) // 2] ^= 0xFF
    api = start_api()
    auth = {"Authorization": f"Bearer {tenant[1]}"}
    body = {"model_id": model["id"], "instances": [[0.0] * model["n_features"]]}
    with replaced_bytes(model["id"], bytes(broken)):
        for r in (httpx.post(api.url + "/predict", json=body, headers=auth, timeout=60),
                  httpx.get(f"{api.url}/models/{model['id']}/file", headers=auth, timeout=60),
                  httpx.get(f"{api.url}/models/{model['id']}/onnx", headers=auth, timeout=60)):
            assert r.status_code == 500, r.text
            problem = r.json()
            assert problem["type"].endswith("/model-file-corrupt"), problem
    r = httpx.post(api.url + "/predict", json=body, headers=auth, timeout=60)
    assert r.status_code == 200, r.text


def test_sweep_removes_what_no_model_needs_and_keeps_the_rest(trained, client, stack_env):
    """Local model files are only copies: cache files of deleted models and old-layout files
    whose bytes are in Postgres (or whose model is gone) go once stale, with stale temporary
    files; a live model's cache file and fresh files stay."""
    from app.services.model_registry import model_store

    mid = trained["model"]["id"]
    assert client.get(f"/models/{mid}/file").status_code == 200  # writes the cache copy
    root = Path(stack_env["SODM_DATA_DIR"])
    cache, legacy = root / model_store.CACHE_DIR, root / model_store.LEGACY_DIR
    live_cache = next(cache.glob(f"{mid}.*.sodm"))
    legacy.mkdir(parents=True, exist_ok=True)
    old = time.time() - 2 * model_store.STALE_SECONDS
    stale_tmp = cache / f".x.sodm.{uuid.uuid4().hex}.tmp"
    gone_cache = cache / f"{uuid.uuid4()}.0123456789abcdef.sodm"
    stored_legacy = legacy / f"{mid}.sodm"
    gone_legacy = legacy / f"{uuid.uuid4()}.sodm"
    fresh_gone = cache / f"{uuid.uuid4()}.0123456789abcdef.sodm"
    fresh_tmp = legacy / f".y.sodm.{uuid.uuid4().hex}.tmp"
    for p in (stale_tmp, gone_cache, stored_legacy, gone_legacy, fresh_gone, fresh_tmp):
        p.write_bytes(b"x")
    for p in (stale_tmp, gone_cache, stored_legacy, gone_legacy, live_cache):
        os.utime(p, (old, old))
    removed = model_store.sweep()
    assert sorted(removed) == sorted(p.name for p in (stale_tmp, gone_cache, stored_legacy,
                                                      gone_legacy))
    assert live_cache.is_file() and fresh_gone.is_file() and fresh_tmp.is_file()
    for p in (fresh_gone, fresh_tmp):
        p.unlink()


def test_train_answers_quickly_when_redis_is_silent(start_api, tenant, trained):
    """A Redis that accepts connections and never answers (a listening socket nobody
    serves) as broker and limiter store: POST /train still answers 202 with a QUEUED job
    within a few broker timeouts (1 s here), never hanging on the dead Redis."""
    import socket

    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)  # the kernel completes handshakes; nothing ever reads or writes
    url = f"redis://127.0.0.1:{hole.getsockname()[1]}/0"
    try:
        api = start_api(CELERY_BROKER_URL=url, SODM_REDIS_URL=url,
                        SODM_BROKER_TIMEOUT_SECONDS="1")
        t0 = time.monotonic()
        r = httpx.post(api.url + "/train", headers={"Authorization": f"Bearer {tenant[1]}"},
                       json={"dataset_id": trained["dataset"]["id"], "algorithm": "sodm",
                             "params": {"kernel": "linear"}}, timeout=120)
        took = time.monotonic() - t0
    finally:
        hole.close()
    assert r.status_code == 202 and r.json()["state"] == "QUEUED", r.text
    assert took < 30, f"POST /train took {took:.1f}s with a silent Redis"


def test_history_keeps_levels_and_thins_ticks():
    """``worker.lifecycle.history.thin``: all level records stay, other records are cut to at most
    MAX_TICKS evenly spread ones (the first and the newest kept), order preserved."""
    from worker.lifecycle.history import MAX_TICKS, thin

    records = [{"epoch": e} for e in range(1, 10_001)]
    records[5000:5000] = [{"level": lvl} for lvl in range(12)]
    out = thin(records)
    assert [r for r in out if "level" in r] == [{"level": lvl} for lvl in range(12)]
    epochs = [r["epoch"] for r in out if "epoch" in r]
    assert 0 < len(epochs) <= MAX_TICKS and epochs[0] == 1 and epochs[-1] == 10_000
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)
    assert max(b - a for a, b in zip(epochs, epochs[1:], strict=False)) <= 2 * 10_000 / MAX_TICKS
    assert thin(records[:50]) == records[:50]


def test_long_svrg_job_history_is_bounded(client, trained):
    """An SVRG fit of 2,000 epochs (one record each) through the service: the job's history
    holds at most MAX_TICKS epoch records, from the first epoch to the last."""
    from worker.lifecycle.history import MAX_TICKS

    job = submit(client, {"dataset_id": trained["dataset"]["id"], "algorithm": "svrg",
                          "params": {"epochs": 2000, "tol": 1e-300}, "test_fraction": 0.2})
    done = wait_job(client, job["id"], timeout=300)
    assert done["state"] == "SUCCEEDED", done["error"]
    history = client.get(f"/jobs/{job['id']}").json()["history"]
    epochs = [r["epoch"] for r in history if "epoch" in r]
    assert 100 <= len(epochs) <= MAX_TICKS, len(epochs)
    assert epochs[0] == 1 and epochs == sorted(epochs)
