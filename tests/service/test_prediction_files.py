"""Batch prediction outputs on disk: a job cancelled after its last batch (the cancel lands
between the output's rename and the job's commit) leaves no output, and the reaper's sweep
removes stale temporary outputs and outputs no live job owns, keeping the others. Jobs run
in this process (claimed from a private queue) on the real Postgres."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import update

from tests.service.jobs_helpers import submit, upload


def _train(api: Any, dataset_id: str) -> str:
    """Train a linear model in this process; returns the model id."""
    from app.core.orm import JobState
    from worker import runner
    from worker.lifecycle import lease

    job_id = submit(api, {"dataset_id": dataset_id, "algorithm": "sodm",
                          "params": {"kernel": "linear"}})["id"]
    assert runner.run_claimed(lease.claim(job_id)) == JobState.SUCCEEDED
    return api.get(f"/jobs/{job_id}").json()["model_id"]


def _predict_job(api: Any, model_id: str, dataset_id: str) -> str:
    r = api.post("/predictions", json={"model_id": model_id, "dataset_id": dataset_id})
    assert r.status_code == 202, r.text
    return r.json()["id"]


def test_a_prediction_cancelled_after_its_last_batch_leaves_no_output(
        api: Any, datasets_dir: Any, private_queue: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core.db import session_scope
    from app.core.orm import Job, JobState
    from app.services.filestore.storage import prediction_path, tmp_root
    from worker import runner
    from worker.lifecycle import lease
    from worker.prediction import predict_job

    ds = upload(api, datasets_dir, "heart_scale")
    model_id = _train(api, ds["id"])
    job_id = _predict_job(api, model_id, ds["id"])
    write = predict_job.write_predictions
    written: list[bool] = []

    def write_then_cancel(*args: Any, **kwargs: Any) -> dict[str, Any]:
        record = write(*args, **kwargs)
        written.append(prediction_path(job_id).exists())
        with session_scope() as s:  # the user's cancel arrives now
            s.execute(update(Job).where(Job.id == job_id).values(state=JobState.CANCELLING))
        return record

    monkeypatch.setattr(predict_job, "write_predictions", write_then_cancel)
    assert runner.run_claimed(lease.claim(job_id)) == JobState.CANCELLED
    assert written == [True]  # the output was complete when the cancel came
    assert not prediction_path(job_id).exists()
    assert not [p for p in tmp_root().iterdir() if job_id in p.name]
    assert api.get(f"/predictions/{job_id}").json()["state"] == "CANCELLED"


def test_sweep_removes_stale_outputs_no_live_job_owns(
        api: Any, datasets_dir: Any, private_queue: str) -> None:
    from app.core.orm import JobState
    from app.services.filestore.stale_files import STALE_SECONDS
    from app.services.filestore.storage import prediction_path
    from app.services.job_queue import prediction_files
    from worker import runner
    from worker.lifecycle import lease

    ds = upload(api, datasets_dir, "heart_scale")
    model_id = _train(api, ds["id"])
    done = _predict_job(api, model_id, ds["id"])
    assert runner.run_claimed(lease.claim(done)) == JobState.SUCCEEDED
    cancelled = _predict_job(api, model_id, ds["id"])
    assert api.post(f"/predictions/{cancelled}/cancel").json()["state"] == "CANCELLED"
    queued = _predict_job(api, model_id, ds["id"])
    kept = prediction_path(done).local_path
    of_cancelled, of_queued = (prediction_path(cancelled).local_path,
                               prediction_path(queued).local_path)
    of_nobody, fresh_of_nobody = (prediction_path(str(uuid.uuid4())).local_path,
                                  prediction_path(str(uuid.uuid4())).local_path)
    for p in (of_cancelled, of_queued, of_nobody, fresh_of_nobody):
        p.write_bytes(b"x")
    old = time.time() - 2 * STALE_SECONDS
    for p in (of_cancelled, of_queued, of_nobody, kept):
        os.utime(p, (old, old))
    removed = prediction_files.sweep()
    assert sorted(removed) == sorted([of_cancelled.name, of_nobody.name])
    assert kept.is_file() and of_queued.is_file() and fresh_of_nobody.is_file()
    assert api.get(f"/predictions/{done}/result").status_code == 200
    for p in (of_queued, fresh_of_nobody):
        p.unlink()
