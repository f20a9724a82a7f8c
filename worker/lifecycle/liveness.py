"""Worker heartbeats: the main process of each worker keeps its row in ``workers`` fresh
(every ``SODM_WORKER_HEARTBEAT_SECONDS``) from a daemon thread, and deletes it at a clean
shutdown. A worker that dies stops beating; ``app.services.job_queue.worker_status`` counts it dead
after three periods. Rows unseen for a day are pruned by any worker."""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import timedelta

from sqlalchemy import delete, update

from app.core.config import get_settings
from app.core.db import session_scope
from app.core.orm import Worker, utcnow

log = logging.getLogger(__name__)

PRUNE_AFTER = timedelta(days=1)

_thread: threading.Thread | None = None
_stop = threading.Event()


def worker_key() -> str:
    """``host:pid`` of this (main) worker process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def beat(concurrency: int = 1) -> None:
    """Insert or refresh this process's row (only this process writes it)."""
    now = utcnow()
    key = worker_key()
    with session_scope() as s:
        hit = s.execute(update(Worker).where(Worker.id == key).values(last_seen=now)).rowcount
        if not hit:
            s.add(Worker(id=key, hostname=socket.gethostname(), pid=os.getpid(),
                         queue=get_settings().celery_queue, concurrency=concurrency,
                         started_at=now, last_seen=now))
        s.execute(delete(Worker).where(Worker.last_seen < now - PRUNE_AFTER))


def _loop(concurrency: int) -> None:
    period = float(get_settings().worker_heartbeat_seconds)
    while True:
        try:
            beat(concurrency)
        except Exception:  # noqa: BLE001 - the database may be restarting; beat again later
            log.warning("worker heartbeat failed", exc_info=True)
        if _stop.wait(period):
            return


def start(concurrency: int = 1) -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(target=_loop, args=(concurrency,), name="sodm-liveness",
                               daemon=True)
    _thread.start()


def stop() -> None:
    """Stop beating and remove this worker's row (best effort)."""
    _stop.set()
    try:
        with session_scope() as s:
            s.execute(delete(Worker).where(Worker.id == worker_key()))
    except Exception:  # noqa: BLE001 - the row goes stale instead
        log.warning("could not remove this worker's heartbeat row", exc_info=True)
