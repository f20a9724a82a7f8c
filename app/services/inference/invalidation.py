"""Cross-process invalidation of the hot-path caches (keys, model rows, loaded models).

Whoever revokes a key or deletes or adds a model calls ``publish`` after the commit: the
change is applied to this process's caches at once and sent on a Redis pub/sub channel
(namespaced by ``SODM_CELERY_QUEUE``, so separate deployments on one Redis never mix) to
every API process, whose ``Subscriber`` thread applies it. A subscriber that loses its
connection empties the caches when it is back (it may have missed messages); while it is
down, entries still expire after their TTL. Without Redis (the embedded quick start) only
the TTL applies across processes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import orjson

from app.core.config import get_settings
from app.services.inference import cache

log = logging.getLogger("sodm.invalidation")


def channel() -> str:
    return f"sodm:{get_settings().celery_queue}:invalidate"


def apply(msg: dict[str, Any]) -> None:
    """Drop what a message names from this process's caches."""
    kind = msg.get("kind")
    if kind == "keys":
        hashes = set(msg.get("hashes") or ())
        cache.keys().drop(lambda _k, v: v.key_hash in hashes)
    elif kind == "tenant":
        tid = msg.get("tenant_id")
        cache.keys().drop(lambda _k, v: v.tenant_id == tid)
    elif kind == "model":
        mid, tid, name = msg.get("model_id"), msg.get("tenant_id"), msg.get("name")
        cache.models().drop(lambda k, v: v.id == mid or (v.tenant_id == tid and v.name == name))
        if msg.get("deleted") and mid:
            from app.services.inference import predictor

            predictor.evict(str(mid))


def publish(kind: str, **fields: Any) -> None:
    """Apply here, then tell the other processes (best effort: the TTL bounds a loss)."""
    msg = {"kind": kind, **fields}
    apply(msg)
    url = get_settings().resolved_redis_url
    if url is None:
        return
    try:
        import redis

        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.publish(channel(), orjson.dumps(msg))
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - the TTL still bounds staleness
        log.warning("cache invalidation not published (%s): caches expire within their TTL",
                    type(exc).__name__)


class Subscriber(threading.Thread):
    """Applies the channel's messages in this process until ``stop()``."""

    def __init__(self, url: str) -> None:
        super().__init__(name="cache-invalidation", daemon=True)
        self.url = url
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self._pubsub: Any = None
        self._warned = False

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(Exception):
            if self._pubsub is not None:
                self._pubsub.close()

    def run(self) -> None:
        import redis

        while not self._stopping.is_set():
            try:
                client = redis.Redis.from_url(self.url, socket_connect_timeout=2,
                                              health_check_interval=10)
                self._pubsub = client.pubsub(ignore_subscribe_messages=True)
                self._pubsub.subscribe(channel())
                cache.clear()  # anything published while we were not listening is lost
                if self._warned:
                    log.info("cache invalidation channel back")
                    self._warned = False
                self.ready.set()
                while not self._stopping.is_set():
                    msg = self._pubsub.get_message(timeout=1.0)
                    if msg and msg.get("type") == "message":
                        with contextlib.suppress(Exception):
                            apply(orjson.loads(msg["data"]))
            except Exception as exc:  # noqa: BLE001 - reconnect; the TTL covers the gap
                if self._stopping.is_set():
                    return
                if self.ready.is_set() or not self._warned:  # once per outage
                    log.warning("cache invalidation channel down (%s); retrying every "
                                "second, caches expire within their TTL", type(exc).__name__)
                    self._warned = True
                self.ready.clear()
                self._stopping.wait(1.0)
            finally:
                with contextlib.suppress(Exception):
                    if self._pubsub is not None:
                        self._pubsub.close()


_subscriber: Subscriber | None = None


def start() -> Subscriber | None:
    """Start this process's subscriber (once); None without Redis."""
    global _subscriber
    url = get_settings().resolved_redis_url
    if url is None:
        return None
    if _subscriber is None or not _subscriber.is_alive():
        _subscriber = Subscriber(url)
        _subscriber.start()
        _subscriber.ready.wait(timeout=2.0)
    return _subscriber


def stop() -> None:
    global _subscriber
    if _subscriber is not None:
        _subscriber.stop()
        _subscriber.join(timeout=3)
        _subscriber = None


def wait_ready(timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _subscriber is not None and _subscriber.ready.is_set():
            return True
        time.sleep(0.05)
    return False
