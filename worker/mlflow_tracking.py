"""Training jobs as MLflow runs, when ``MLFLOW_TRACKING_URI`` is set.

After a training job's terminal state is committed, ``job_ended`` hands its id to one
background thread of the worker process, which reads the committed rows and logs an MLflow
run in the experiment ``MLFLOW_EXPERIMENT_NAME`` (default ``sodm``): the job's parameters
with the "auto" ones resolved (``params.<name>``; ``auto`` lists which were chosen), the
held-out metrics and the training history as step metrics, the CV table of the "auto"
search (``auto/cv_table.json``), the margin statistics and histogram
(``margin/histogram.json``, ``margin/stats.json``), and the ONNX graph of the model
(``solver.io.export``) logged as an MLflow model and registered under the model's name; the
registered version gets the alias ``sodm_v<version>`` (MLflow numbers its versions itself
and reserves ``v<n>``) and the tags ``sodm.version`` / ``sodm.model_id``. A failed or
cancelled job becomes a FAILED / KILLED run with its parameters and problem.

Never at a job's expense: the run is logged after the job's state is committed, off the
job's thread, with short HTTP timeouts and one retry; an MLflow that is down or refuses is
a warning in the log and ``sodm_worker_mlflow_runs_total{outcome="failed"}``. With the
variable unset nothing here runs and ``mlflow`` is never imported.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from typing import Any

from sqlalchemy import select

from app.core.db import session_scope
from app.core.orm import Job, JobKind, JobState, Model
from worker import metrics

log = logging.getLogger(__name__)

ENV = "MLFLOW_TRACKING_URI"
EXPERIMENT = "sodm"
# what a job's run may wait on MLflow (the user's settings win)
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
RUN_STATUS = {JobState.SUCCEEDED: "FINISHED", JobState.FAILED: "FAILED",
              JobState.CANCELLED: "KILLED"}
MAX_PARAM_CHARS = 6000  # MLflow's limit of a parameter value

_queue: queue.Queue[str | None] = queue.Queue()
_thread: list[threading.Thread] = []


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def job_ended(job_id: str) -> None:
    """Log the job as an MLflow run in the background (no-op while the variable is unset)."""
    if not enabled():
        return
    if not _thread or not _thread[0].is_alive():
        _import_pyspark()
        _thread[:] = [threading.Thread(target=_work, name="sodm-mlflow", daemon=True)]
        _thread[0].start()
    _queue.put(job_id)


def _import_pyspark() -> None:
    """Import pyspark (where installed) on this thread before the MLflow thread starts.
    MLflow imports pyspark lazily while it logs (its Databricks checks); a Spark job
    importing it on the job's thread at the same moment gets a partially initialised
    ``pyspark.sql`` ("cannot import name 'SQLContext'", a failed job). Imported once here,
    both threads find it whole."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is not None:
        import pyspark.sql  # noqa: F401


def drain(timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the runs still queued (a worker process ending)."""
    if not _thread or not _thread[0].is_alive():
        return
    _queue.put(None)
    _thread[0].join(timeout)


def _work() -> None:
    while True:
        job_id = _queue.get()
        if job_id is None:
            return
        started = time.monotonic()
        try:
            logged = log_job(job_id)
        except Exception as exc:  # noqa: BLE001 - MLflow down or refusing: never the job's
            metrics.MLFLOW_RUNS.labels("failed").inc()
            log.warning("job %s: MLflow run not logged (%s: %s)", job_id, type(exc).__name__,
                        str(exc)[:300])
            continue
        if logged:
            metrics.MLFLOW_RUNS.labels("logged").inc()
            log.info("job %s logged to MLflow as run %s in %.1f s", job_id, logged,
                     time.monotonic() - started)


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    """Numbers of a nested dict as dotted keys (lists and text are left out)."""
    if isinstance(value, int | float):  # bool included
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:MAX_PARAM_CHARS]


def log_job(job_id: str) -> str | None:
    """Log one ended training job as an MLflow run; its run id (None: not a training job
    or not ended)."""
    with session_scope() as s:
        job = s.get(Job, job_id)
        if job is None or job.kind != JobKind.TRAIN or job.state not in RUN_STATUS:
            return None
        model = s.scalars(select(Model).where(Model.job_id == job_id)).first()
        s.expunge_all()
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import mlflow
    from mlflow import MlflowClient

    client = MlflowClient()
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    asked = dict(job.params or {})
    params = dict(model.params) if model is not None else asked
    tags = {"sodm.job_id": job.id, "sodm.tenant_id": job.tenant_id,
            "sodm.request_id": job.request_id or "", "sodm.algorithm": job.algorithm,
            "sodm.backend": job.backend, "sodm.dataset_id": job.dataset_id,
            "mlflow.runName": f"{job.model_name or job.algorithm}"
                              + (f" v{model.version}" if model is not None else "")}
    run = mlflow.start_run(experiment_id=experiment_id, tags=tags)
    try:
        client.log_batch(run.info.run_id, params=[
            mlflow.entities.Param(k[:250], _text(v)) for k, v in sorted({
                **{f"params.{k}": v for k, v in params.items()},
                "algorithm": job.algorithm, "backend": job.backend,
                "seed": (job.request or {}).get("seed"),
                "test_fraction": (job.request or {}).get("test_fraction"),
                "auto": sorted(k for k, v in asked.items() if v == "auto"),
            }.items())])
        if model is not None:
            _log_model(client, run.info.run_id, job, model)
        else:
            mlflow.log_dict(job.error or {}, "problem.json")
    except BaseException:
        mlflow.end_run("FAILED")
        raise
    mlflow.end_run(RUN_STATUS[JobState(job.state)])
    return run.info.run_id


def _log_model(client: Any, run_id: str, job: Job, model: Model) -> None:
    import mlflow

    values: dict[str, float] = {}
    _flat("", {k: v for k, v in (model.metrics or {}).items() if k != "search"}, values)
    values.update({"train_seconds": float(model.train_seconds or 0.0),
                   "n_support_vectors": float(model.n_support_vectors or 0)})
    now = int(time.time() * 1000)
    batch = [mlflow.entities.Metric(k[:250], v, now, 0) for k, v in sorted(values.items())]
    for step, record in enumerate(job.history or []):
        for key in ("objective", "kkt_violation", "val_accuracy"):
            if isinstance(record.get(key), int | float):
                batch.append(mlflow.entities.Metric(
                    f"history.{key}", float(record[key]), now,
                    int(record.get("level", record.get("epoch", step)) or step)))
    for start in range(0, len(batch), 900):  # MLflow takes 1000 metrics per batch
        client.log_batch(run_id, metrics=batch[start:start + 900])
    auto = (model.fit_info or {}).get("auto") or {}
    if auto.get("cv_table"):
        mlflow.log_dict({"chosen": auto.get("chosen"), "cv_table": auto["cv_table"]},
                        "auto/cv_table.json")
    margin = dict(model.margin or {})
    if margin.get("histogram"):
        mlflow.log_dict(margin["histogram"], "margin/histogram.json")
    mlflow.log_dict(margin, "margin/stats.json")
    mlflow.log_dict({"metrics": model.metrics, "fit_info": model.fit_info}, "model.json")
    info = mlflow.onnx.log_model(_onnx(model), name="model",
                                 registered_model_name=model.name,
                                 pip_requirements=["onnxruntime"],
                                 await_registration_for=0)
    version = getattr(info, "registered_model_version", None)
    if version is not None:
        client.set_registered_model_alias(model.name, f"sodm_v{model.version}", version)
        client.set_model_version_tag(model.name, version, "sodm.version", str(model.version))
        client.set_model_version_tag(model.name, version, "sodm.model_id", model.id)


def _onnx(model: Model) -> Any:
    import onnx

    from app.services.model_registry import model_store
    from solver.io.export import to_onnx_bytes

    est = model_store.load(model.id, model.file_sha256)
    return onnx.load_from_string(to_onnx_bytes(est, name=f"{model.name}-v{model.version}"))
