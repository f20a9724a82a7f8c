"""The worker's Celery application: the broker settings it shares with the service's task
client (``app.services.job_queue.task_client.celery_config``: Redis in the real stack, kombu's
SQLAlchemy transport on the embedded defaults), reliability settings for long training tasks
(late acks, one message at a time, time limits) and the reaper thread of every worker.

Postgres holds the job state; results are ignored. ``acks_late`` + ``reject_on_worker_lost``
redeliver a job whose pool child died; the claim in ``worker.lifecycle.lease`` and the attempt
counter make that redelivery safe and bounded.
"""

from __future__ import annotations

from celery import Celery
from celery.signals import (
    setup_logging,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)

from app.core.config import get_settings
from app.services.job_queue.task_client import celery_config
from app.services.job_queue.task_client import transport_options as transport_options_of


def _visibility_timeout() -> int:
    s = get_settings()
    return int(s.visibility_timeout_seconds or 2 * s.job_time_limit_seconds)


def _soft_time_limit(hard: int) -> int:
    """The soft limit (``SoftTimeLimitExceeded`` -> FAILED time-limit) leaves the job up to
    60 s (a tenth of a short limit) to record its failure before the hard kill."""
    return max(1, hard - min(60, max(1, hard // 10)))


def _restore_options(vt: int) -> dict:
    """kombu's Redis restore scan runs every interval x throttle (default 10 x 10 s); a short
    visibility timeout gets a scan period of about a quarter of it."""
    if vt >= 400:
        return {}
    return {"unacked_restore_interval": max(1, min(10, vt // 4)),
            "unacked_restore_throttle": 1}


def make_celery() -> Celery:
    s = get_settings()
    if s.resolved_broker_url.startswith("sqla+sqlite"):
        s.data_dir.mkdir(parents=True, exist_ok=True)
    app = Celery("sodm", include=["worker.tasks"])
    vt = _visibility_timeout()
    conf = celery_config(s)
    transport_options = transport_options_of(s, producer=False)
    if not s.resolved_broker_url.startswith("sqla+"):
        transport_options.update(visibility_timeout=vt, **_restore_options(vt))
    conf.update(
        broker_transport_options=transport_options,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_track_started=False,
        visibility_timeout=vt,
        task_time_limit=s.job_time_limit_seconds,
        task_soft_time_limit=_soft_time_limit(s.job_time_limit_seconds),
        worker_soft_shutdown_timeout=30,
        # a broker blip must not cost a running job an attempt: the fit goes on; its
        # restored message is refused by the claim while the job's lease is held
        worker_cancel_long_running_tasks_on_connection_loss=False,
        worker_hijack_root_logger=False,
    )
    app.conf.update(conf)
    return app


celery_app = make_celery()


@setup_logging.connect
def _logging(**_: object) -> None:
    """The service's log format (``app.core.logs``) instead of Celery's own setup."""
    from app.core.logs import configure

    s = get_settings()
    configure(s.log_format, s.log_level)


@worker_process_init.connect
def _fresh_db_pool(**_: object) -> None:
    """A forked pool child must not share the parent's pooled database connections."""
    from app.core.db import get_engine

    get_engine().dispose(close=False)


@worker_init.connect
def _preload(**_: object) -> None:
    """The main process loads what jobs import before it forks its pool children, so no
    job maps a library under its memory limit (``worker.lifecycle.memory``) and a new child starts
    warm."""
    from worker.lifecycle.memory import preload

    preload()


@worker_ready.connect
def _start_reaper(sender: object = None, **_: object) -> None:
    """Every worker runs the reaper/reconciler in its main process (conditional updates make
    concurrent reapers harmless), writes its heartbeat (``worker.lifecycle.liveness``) and sends
    webhook deliveries (``worker.webhooks``; claims make concurrent senders harmless)."""
    from worker import webhooks
    from worker.lifecycle import liveness
    from worker.lifecycle.reaper import start_reaper_thread

    start_reaper_thread()
    webhooks.start()
    liveness.start(int(getattr(getattr(sender, "controller", None), "concurrency", 0) or 1))


@worker_process_shutdown.connect
def _finish_mlflow_runs(**_: object) -> None:
    """A pool child that ends gives the MLflow runs it still holds a few seconds."""
    from worker import mlflow_tracking

    mlflow_tracking.drain(10.0)


@worker_shutdown.connect
def _stop_reaper(**_: object) -> None:
    from worker import webhooks
    from worker.lifecycle import liveness
    from worker.lifecycle.reaper import stop_reaper_thread

    stop_reaper_thread()
    webhooks.stop()
    liveness.stop()


@worker_shutting_down.connect
def _hand_back_jobs(**_: object) -> None:
    """SIGTERM/SIGQUIT: give this worker's RUNNING jobs back (QUEUED, re-sent) instead of
    making the shutdown wait for them; the pool child sees the job is no longer its own at
    the next heartbeat and stops the fit without writing (``worker.lifecycle.lease``)."""
    from worker.lifecycle.lease import hand_back_children

    hand_back_children()
