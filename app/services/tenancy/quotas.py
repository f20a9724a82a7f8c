"""Per-tenant quotas: stored bytes (507), active jobs (429) and open event streams (429).

* storage: the bytes the tenant's live datasets hold on disk (``Dataset.stored_bytes``: an
  upload in flight counts its body, its decompressed copy and its output as they are
  written, a stored dataset its files) and its model files; checked before an upload (with
  its declared length), while its body arrives, while it is decompressed and stored
  (``StorageCharge``), and before ``POST /train`` (a model will be stored);
  ``SODM_QUOTA_STORAGE_MB``;
* active jobs: QUEUED, RUNNING and CANCELLING jobs, checked before a new job is inserted;
  ``SODM_QUOTA_ACTIVE_JOBS``;
* event streams: open ``/jobs/{id}/events`` responses in every API process, counted in a
  Redis sorted set per tenant (member: the stream, score: when its claim expires, renewed
  while it is open, so a crashed process's streams age out); in this process's memory
  without Redis; ``SODM_QUOTA_EVENT_STREAMS``. When Redis cannot be reached streams are let
  through, as the rate limiter does.
A quota of 0 turns the check off.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from functools import lru_cache
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.core.config import get_settings
from app.core.orm import Dataset, Job, JobState, Model
from app.core.problems import ProblemError

log = logging.getLogger("sodm.quotas")

MB = 1 << 20
ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING)
STREAM_TTL_SECONDS = 60.0


# an upload in flight writes its bytes to its row (and checks the quota) this often
CHARGE_STEP_BYTES = 16 * MB


def stored_bytes(session: Session, tenant_id: str) -> int:
    """Bytes the tenant's live datasets hold on disk, and its model files."""
    data = session.scalar(select(func.coalesce(func.sum(Dataset.stored_bytes), 0)).where(
        Dataset.tenant_id == tenant_id, Dataset.deleted_at.is_(None)))
    models = session.scalar(select(func.coalesce(func.sum(Model.file_bytes), 0)).where(
        Model.tenant_id == tenant_id, Model.deleted_at.is_(None)))
    return int(data or 0) + int(models or 0)


def storage_problem(quota: int, used: int) -> ProblemError:
    return ProblemError(507, "Storage quota exceeded",
                        detail=f"this tenant stores {used:,} bytes of datasets and models; "
                               f"its quota is {quota:,} bytes (SODM_QUOTA_STORAGE_MB): "
                               "delete datasets or models first",
                        type="storage-quota", quota_bytes=quota, used_bytes=used)


def check_storage(session: Session, tenant_id: str, incoming: int = 0) -> None:
    """507 problem when the tenant's stored bytes plus ``incoming`` pass the quota (a
    store already at its quota refuses anything new)."""
    quota_mb = get_settings().quota_storage_mb
    if quota_mb <= 0:
        return
    quota, used = quota_mb * MB, stored_bytes(session, tenant_id)
    if used + max(0, incoming) > quota or used >= quota:
        raise storage_problem(quota, used)


def storage_headroom(tenant_id: str, incoming: int = 0) -> int | None:
    """``check_storage`` in a session of its own (before an upload is received); returns
    the bytes the tenant may still store (None: no quota), which its body may not pass."""
    from app.core.db import get_read_sessionmaker

    quota_mb = get_settings().quota_storage_mb
    if quota_mb <= 0:
        return None
    with get_read_sessionmaker()() as session:
        check_storage(session, tenant_id, incoming)
        return quota_mb * MB - stored_bytes(session, tenant_id)


class StorageCharge:
    """The bytes an upload in flight holds on disk, written to its dataset row as they
    grow (every ``CHARGE_STEP_BYTES``) and checked against the tenant's quota each time:
    a decompression bomb stops within a step of the quota, and concurrent uploads of one
    tenant see one another's bytes (each writes its own, then reads the sum)."""

    def __init__(self, dataset_id: str, tenant_id: str, charged: int = 0) -> None:
        self.dataset_id, self.tenant_id = dataset_id, tenant_id
        self.charged = charged

    def update(self, nbytes: int, *, force: bool = False) -> None:
        """Charge ``nbytes`` in all; 507 ``storage-quota`` when the tenant is then over."""
        if not force and abs(nbytes - self.charged) < CHARGE_STEP_BYTES:
            return
        from app.core.db import session_scope

        grew = nbytes > self.charged
        with session_scope() as session:
            session.execute(update(Dataset).where(Dataset.id == self.dataset_id)
                            .values(stored_bytes=nbytes))
        self.charged = nbytes
        quota_mb = get_settings().quota_storage_mb
        if not grew or quota_mb <= 0:
            return
        with session_scope() as session:
            used = stored_bytes(session, self.tenant_id)
        if used > quota_mb * MB:
            raise storage_problem(quota_mb * MB, used)


def check_active_jobs(session: Session, tenant_id: str) -> None:
    """429 problem when the tenant already has its quota of queued and running jobs."""
    quota = get_settings().quota_active_jobs
    if quota <= 0:
        return
    active = session.scalar(select(func.count()).select_from(Job).where(
        Job.tenant_id == tenant_id, Job.state.in_(ACTIVE_STATES))) or 0
    if active >= quota:
        raise ProblemError(429, "Too many active jobs",
                           detail=f"this tenant has {active} queued or running jobs; its quota "
                                  f"is {quota} (SODM_QUOTA_ACTIVE_JOBS): wait for one to "
                                  "finish or cancel one", type="job-quota",
                           headers={"Retry-After": "10"}, quota=quota, active=int(active))


# ----------------------------------------------------------------------- event streams
class _LocalStreams:
    """Open streams of this process (the embedded stack has no Redis)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, dict[str, float]] = {}

    def claim(self, tenant_id: str, stream: str, quota: int) -> bool:
        now = time.monotonic()
        with self._lock:
            mine = {k: v for k, v in self._open.get(tenant_id, {}).items() if v > now}
            if len(mine) >= quota:
                return False
            mine[stream] = now + STREAM_TTL_SECONDS
            self._open[tenant_id] = mine
            return True

    def renew(self, tenant_id: str, stream: str) -> None:
        with self._lock:
            mine = self._open.get(tenant_id, {})
            if stream in mine:
                mine[stream] = time.monotonic() + STREAM_TTL_SECONDS

    def release(self, tenant_id: str, stream: str) -> None:
        with self._lock:
            self._open.get(tenant_id, {}).pop(stream, None)


_local = _LocalStreams()


@lru_cache
def _redis() -> Any:
    import redis

    url = get_settings().resolved_redis_url
    if url is None:
        return None
    t = float(get_settings().broker_timeout_seconds)
    return redis.Redis.from_url(url, socket_timeout=t, socket_connect_timeout=t)


def _key(tenant_id: str) -> str:
    return f"sodm:{get_settings().celery_queue}:streams:{tenant_id}"


# claim atomically: drop expired members, count, add when below the quota
_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class StreamSlot:
    """One open event stream of a tenant; ``renew`` while open, ``release`` at the end."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.stream = uuid.uuid4().hex
        self.released = False

    def _call(self, fn: Any) -> Any:
        client = _redis()
        if client is None:
            return fn(None)
        try:
            return fn(client)
        except Exception as exc:  # noqa: BLE001 - a limiter outage is not an API outage
            log.warning("event-stream quota: Redis unreachable (%s); not counted",
                        type(exc).__name__)
            return True

    def claim(self, quota: int) -> bool:
        def run(client: Any) -> bool:
            if client is None:
                return _local.claim(self.tenant_id, self.stream, quota)
            now = time.time()
            return bool(client.eval(_CLAIM, 1, _key(self.tenant_id), now,
                                    now + STREAM_TTL_SECONDS, quota, self.stream,
                                    int(2 * STREAM_TTL_SECONDS)))
        return bool(self._call(run))

    def renew(self) -> None:
        def run(client: Any) -> None:
            if client is None:
                _local.renew(self.tenant_id, self.stream)
            else:
                client.zadd(_key(self.tenant_id), {self.stream: time.time()
                                                   + STREAM_TTL_SECONDS}, xx=True)
        self._call(run)

    def release(self) -> None:
        if self.released:
            return
        self.released = True

        def run(client: Any) -> None:
            if client is None:
                _local.release(self.tenant_id, self.stream)
            else:
                client.zrem(_key(self.tenant_id), self.stream)
        self._call(run)


def open_stream(tenant_id: str) -> StreamSlot | None:
    """A slot for a new event stream, or a 429 problem when the tenant has its quota open
    (None: no quota)."""
    quota = get_settings().quota_event_streams
    if quota <= 0:
        return None
    slot = StreamSlot(tenant_id)
    if not slot.claim(quota):
        raise ProblemError(429, "Too many open event streams",
                           detail=f"this tenant has {quota} event streams open, its quota "
                                  "(SODM_QUOTA_EVENT_STREAMS): close one first",
                           type="stream-quota", headers={"Retry-After": "5"}, quota=quota)
    return slot
