"""Run one claimed batch prediction job: the job's model over its dataset, streamed into
``predictions/{job id}.parquet`` (``worker.prediction.batch``), progress per batch, cancellable."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Job, JobState, Model
from app.core.problems import ProblemError
from app.services.job_queue import prediction_files
from app.services.model_registry import model_store
from solver.core.training import jsonable
from solver.exceptions import FitCancelled
from worker.lifecycle.job_state import JobLost, check_going, finish, require_datasets
from worker.lifecycle.lease import ClaimedJob, Heartbeat


class PredictionFailed(Exception):
    """A batch prediction that cannot run (its model was deleted, the columns do not fit)."""

    def __init__(self, kind: str, title: str, detail: str, status: int = 422) -> None:
        super().__init__(detail)
        self.kind, self.title, self.status = kind, title, status


def run_prediction(c: ClaimedJob, hb: Heartbeat) -> str:
    """A batch prediction job: the job's model over its dataset, streamed into
    ``predictions/{job id}.parquet`` (``worker.prediction.batch``); progress
    per batch, cancellable."""
    with session_scope() as s:
        model_id = s.scalar(select(Job.model_id).where(Job.id == c.job_id))
        m = s.get(Model, model_id) if model_id else None
        if m is None or m.deleted_at is not None:
            raise PredictionFailed("model-gone", "Model deleted",
                                   f"model {model_id} was deleted before the job ran", 404)
        names, sha = m.feature_names, m.file_sha256
    require_datasets(c)
    hb.report(0.01, "loading the model")
    try:
        est = model_store.load(model_id, sha)
    except ProblemError as exc:
        raise PredictionFailed(exc.type.rsplit("/", 1)[-1], exc.title, exc.detail or "",
                               exc.status) from None
    try:
        record = write_predictions(c, hb, est, names, model_id)
        check_going(hb)
        if finish(c, JobState.SUCCEEDED, history=[record], from_states=(JobState.RUNNING,)):
            return JobState.SUCCEEDED
        if finish(c, JobState.CANCELLED, history=[record], from_states=(JobState.CANCELLING,)):
            prediction_files.remove(c.job_id)  # cancelled after its last batch
            return JobState.CANCELLED
    except FitCancelled:  # an earlier attempt's complete output may be there
        prediction_files.remove(c.job_id)
        raise
    raise JobLost(c.job_id)


def write_predictions(c: ClaimedJob, hb: Heartbeat, est: Any, names: list[str] | None,
                       model_id: str) -> dict[str, Any]:
    """Stream the predictions into the job's output file; returns the history record."""
    from app.services.filestore import storage
    from app.services.job_queue.prediction_jobs import batch_fraction
    from worker.prediction.batch import predict_dataset

    directory = storage.dataset_dir(c.dataset_id)

    def progress(done: int, total: int) -> None:
        hb.report(batch_fraction(done, total), f"predicted {done:,} of {total:,} rows")

    try:
        summary = predict_dataset(est, directory, storage.prediction_path(c.job_id),
                                  storage.read_meta(directory), names,
                                  batch_bytes=get_settings().predict_batch_bytes,
                                  progress=progress, should_stop=hb.should_stop)
    except ValueError as exc:
        raise PredictionFailed("prediction-failed", "Prediction failed", str(exc)) from exc
    return jsonable({**summary, "model_id": model_id})
