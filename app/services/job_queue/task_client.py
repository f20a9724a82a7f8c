"""The service's side of Celery: send tasks by name, revoke them, ping workers.

The API never imports ``worker/``: it knows the task names only. The broker settings that
producer and consumer must agree on (serializer, queue, transport options with socket
timeouts) live in :func:`celery_config`, which ``worker.celery_app`` builds on.

Every broker call here is bounded: connecting and each socket operation time out after
``SODM_BROKER_TIMEOUT_SECONDS`` and a publish is retried at most once, so a dead or silent
Redis costs ``POST /train`` a few seconds at most (the job row is already committed and the
worker's reconciler re-sends it, ``worker.lifecycle.reaper``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from celery import Celery
from kombu import Queue

from app.core.config import Settings, get_settings

TRAIN_TASK = "worker.tasks.train_job"


def _is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://"))


def transport_options(s: Settings, *, producer: bool = True) -> dict[str, Any]:
    """Broker transport options: socket timeouts on Redis, and for a producer one connection
    retry (kombu's default retries forever); kombu's SQLAlchemy transport hands its options
    to ``create_engine``. A worker's consumer keeps kombu's own reconnection loop."""
    url = s.resolved_broker_url
    if url.startswith("sqla+"):
        return {"connect_args": {"timeout": 30}} if "sqlite" in url else {}
    if not _is_redis(url):
        return {}
    t = float(s.broker_timeout_seconds)
    opts: dict[str, Any] = {"socket_timeout": t, "socket_connect_timeout": t}
    if producer:
        opts.update(max_retries=1, interval_start=0, interval_step=0.5, interval_max=1)
    return opts


def celery_config(s: Settings) -> dict[str, Any]:
    """Configuration common to the task client and the worker application."""
    return {
        "broker_url": s.resolved_broker_url,
        "broker_transport_options": transport_options(s),
        "broker_connection_timeout": float(s.broker_timeout_seconds),
        "broker_connection_retry_on_startup": True,
        "task_default_queue": s.celery_queue,
        "task_queues": [Queue(s.celery_queue)],
        "task_routes": {"worker.tasks.*": {"queue": s.celery_queue}},
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        # a publish is tried twice at most (never the default's 3 retries per connection)
        "task_publish_retry": True,
        "task_publish_retry_policy": {"max_retries": 1, "interval_start": 0,
                                      "interval_step": 0.5, "interval_max": 1},
    }


@lru_cache
def client() -> Celery:
    """A producer-only Celery application on the configured broker (one per process)."""
    s = get_settings()
    if s.resolved_broker_url.startswith("sqla+sqlite"):
        s.data_dir.mkdir(parents=True, exist_ok=True)
    app = Celery("sodm-client", set_as_current=False)
    app.conf.update(celery_config(s))
    return app


def send(task: str, task_id: str, *args: Any) -> None:
    """Publish ``task`` with ``task_id`` on the service's queue; raises when the broker does
    not take it within the timeouts."""
    client().send_task(task, args=list(args), task_id=task_id,
                       queue=get_settings().celery_queue)


def send_train(job_id: str) -> None:
    """Ring the doorbell of a training job (the task id is the job id)."""
    send(TRAIN_TASK, job_id, job_id)


def revoke(task_id: str) -> None:
    """Broadcast a revoke (workers skip the task if it has not started)."""
    client().control.revoke(task_id)


def ping(node: str, timeout: float) -> bool:
    """True when the worker node answers a control ping within ``timeout`` seconds."""
    replies = client().control.ping(destination=[node], timeout=timeout)
    return any(node in r for r in replies)
