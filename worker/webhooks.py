"""The webhook sender of a worker's main process: a daemon thread beside the reaper that,
every ``SODM_WEBHOOK_POLL_SECONDS``, announces ended jobs
(``app.services.notifications.webhook_endpoints``) and hands due deliveries to a pool of
``SODM_WEBHOOK_CONCURRENCY`` sending threads (``app.services.notifications.webhook_delivery``). It
claims only as many deliveries as it has idle senders, so a slow endpoint holds one sender for at
most its timeout and never the loop; the pool children that train are never involved."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from app.core.config import get_settings
from app.core.db import session_scope
from app.services.notifications import webhook_delivery
from app.services.notifications import webhook_endpoints as webhooks

log = logging.getLogger(__name__)

_thread: threading.Thread | None = None
_stop = threading.Event()


def tick(pool: ThreadPoolExecutor, in_flight: set[Future], slots: int) -> int:
    """One pass: announce, then start sends for the idle senders; the sends started."""
    with session_scope() as s:
        while webhooks.announce_jobs(s) == webhooks.ANNOUNCE_BATCH:
            s.commit()
    in_flight -= {f for f in in_flight if f.done()}
    claimed = webhook_delivery.claim_due(slots - len(in_flight))
    for c in claimed:
        in_flight.add(pool.submit(webhook_delivery.attempt, c))
    return len(claimed)


def _loop() -> None:
    s = get_settings()
    slots = int(s.webhook_concurrency)
    in_flight: set[Future] = set()
    with ThreadPoolExecutor(slots, thread_name_prefix="sodm-webhook") as pool:
        while not _stop.wait(float(s.webhook_poll_seconds)):
            try:
                tick(pool, in_flight, slots)
            except Exception:  # noqa: BLE001 - the database may be restarting; try again
                log.warning("webhook pass failed", exc_info=True)
        pool.shutdown(wait=False, cancel_futures=True)


def start() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    _stop.clear()
    _thread = threading.Thread(target=_loop, name="sodm-webhooks", daemon=True)
    _thread.start()


def stop() -> None:
    _stop.set()
