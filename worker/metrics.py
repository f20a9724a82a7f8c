"""The worker's Prometheus metrics. With ``PROMETHEUS_MULTIPROC_DIR`` set (``sodm run``, the
compose file, the tests) every process writes its samples there and the API's ``/metrics``
serves them in the same scrape as its own; current leases and live workers are read from the
database at scrape time (``app.core.observability``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

# fits take from a fraction of a second to hours
_SECONDS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)

JOBS = Counter("sodm_worker_jobs_total", "Job runs by outcome (a terminal state, LOST when "
               "the lease was lost, SKIPPED for a delivery with nothing to claim)",
               ["outcome"])
ATTEMPTS = Counter("sodm_worker_attempts_total", "Job attempts started, by attempt number",
                   ["attempt"])
JOB_SECONDS = Histogram("sodm_worker_job_duration_seconds",
                        "Wall time of one job attempt, claim to end, by outcome", ["outcome"],
                        buckets=_SECONDS)
QUEUE_WAIT = Histogram("sodm_worker_queue_wait_seconds",
                       "Time from a job's (re)queueing to the claim of the attempt",
                       buckets=_SECONDS)
FIT_SECONDS = Histogram("sodm_worker_fit_seconds",
                        "Training time of the models produced (the model's train_seconds)",
                        buckets=_SECONDS)
MLFLOW_RUNS = Counter("sodm_worker_mlflow_runs_total",
                      "Training jobs logged to MLflow (MLFLOW_TRACKING_URI), by outcome "
                      "(logged, failed: MLflow down or refusing; the job is not affected)",
                      ["outcome"])
