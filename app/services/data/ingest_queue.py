"""Fair parse slots: which upload waiting in this API process is parsed next.

An upload holds no slot while its body arrives; once the body is on disk and its row is
inserted it waits here (``submit``). An API process runs at most
``SODM_INGEST_CONCURRENCY`` parses at once (each may use up to ``SODM_INGEST_MEMORY_BYTES``).
A free slot goes to the waiting upload of the tenant with the fewest parses running here
(the longest waiting first among equals), provided that tenant has fewer than
``SODM_INGEST_TENANT_PARSES`` parses running in the whole service
(``datasets.claim_parse`` counts them in the database, under the tenant's row lock): one
tenant never holds more while the others' uploads wait, whichever API process they reach.
A tenant with ``MAX_WAITING_PER_TENANT`` uploads waiting here, or a process with
``MAX_WAITING`` in all, gets 429 ``ingest-busy`` before its body is read (``check_room``).

The dispatcher thread refreshes the heartbeat of the rows waiting here (the parsing
children beat their own), and at shutdown fails them (``ingest-interrupted``) and removes
their files.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data import dataset_catalog as datasets
from app.services.data import ingest_process
from app.services.data.upload_dirs import UploadDir

log = logging.getLogger(__name__)

MAX_WAITING_PER_TENANT = 16
MAX_WAITING = 256
BUSY_RETRY_AFTER_SECONDS = 5
POLL_SECONDS = 1.0  # while uploads wait on a tenant busy in another API process


@dataclass
class _Entry:
    req: ingest_process.IngestRequest
    done: Future[None] = field(default_factory=Future)
    since: float = field(default_factory=time.monotonic)


class _Dispatcher:
    """The uploads waiting in this process, the parses running here per tenant, and the
    thread that starts the next parse whenever a slot frees up or an upload arrives."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: list[_Entry] = []
        self.running: dict[str, int] = {}
        self.poked = False
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, daemon=True,
                                       name="sodm-ingest-dispatch")
        self.thread.start()

    def check_room(self, tenant_id: str) -> None:
        with self.cond:
            mine = sum(1 for e in self.waiting if e.req.tenant_id == tenant_id)
            total = len(self.waiting)
        if mine >= MAX_WAITING_PER_TENANT or total >= MAX_WAITING:
            raise ProblemError(429, "Too many uploads waiting to be parsed",
                               detail=f"{mine} uploads of this tenant ({total} in all) wait "
                                      "for a parse slot in this API process; retry shortly",
                               type="ingest-busy", limit=MAX_WAITING_PER_TENANT,
                               headers={"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)})

    def submit(self, req: ingest_process.IngestRequest) -> Future[None]:
        entry = _Entry(req)
        with self.cond:
            self.waiting.append(entry)
            self._poke()
        return entry.done

    def _poke(self) -> None:
        self.poked = True
        self.cond.notify()

    def _loop(self) -> None:
        next_beat = time.monotonic() + ingest_process.HEARTBEAT_SECONDS
        while True:
            with self.cond:
                if not self.poked and not self.stopped:
                    self.cond.wait(POLL_SECONDS if self.waiting
                                   else ingest_process.HEARTBEAT_SECONDS)
                self.poked = False
                if self.stopped:
                    return
                waiting = [e.req.dataset_id for e in self.waiting]
            try:
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + ingest_process.HEARTBEAT_SECONDS
                    datasets.heartbeat_owned(waiting)
                while self._dispatch_once():
                    pass
            except Exception:  # noqa: BLE001 - the database may be restarting; retry
                log.warning("ingest dispatch failed", exc_info=True)

    def _candidates(self) -> list[_Entry]:
        """The first waiting upload of each tenant, fairest first; none without a slot."""
        with self.cond:
            if sum(self.running.values()) >= get_settings().ingest_concurrency:
                return []
            heads: dict[str, _Entry] = {}
            for e in self.waiting:
                heads.setdefault(e.req.tenant_id, e)
            return sorted(heads.values(),
                          key=lambda e: (self.running.get(e.req.tenant_id, 0), e.since))

    def _dispatch_once(self) -> bool:
        """Start (or drop) one waiting upload; False when none can start now."""
        for entry in self._candidates():
            claim = datasets.claim_parse(entry.req.dataset_id, entry.req.tenant_id)
            if claim is datasets.Claim.TENANT_BUSY:
                continue
            with self.cond:
                if entry not in self.waiting:  # stop() took it: it fails the row
                    return False
                self.waiting.remove(entry)
                if claim is datasets.Claim.STARTED:
                    tenant = entry.req.tenant_id
                    self.running[tenant] = self.running.get(tenant, 0) + 1
            if claim is datasets.Claim.GONE:  # deleted while it waited
                UploadDir(entry.req.dataset_id).remove()
                entry.done.set_result(None)
                return True
            try:
                ingest_process.start(entry.req, on_exit=lambda e=entry: self._finished(e))
            except Exception:  # noqa: BLE001 - the row is failed, the waiting request told
                log.exception("could not start the parse of dataset %s", entry.req.dataset_id)
                datasets.mark_failed(entry.req.dataset_id,
                                     ingest_process.limit_problem(1).body())
                UploadDir(entry.req.dataset_id).remove()
                self._finished(entry)
            return True
        return False

    def _finished(self, entry: _Entry) -> None:
        with self.cond:
            tenant = entry.req.tenant_id
            self.running[tenant] -= 1
            if not self.running[tenant]:
                del self.running[tenant]
            self._poke()
        entry.done.set_result(None)

    def stop(self) -> None:
        """Fail the uploads still waiting (their rows would otherwise wait for the sweep)
        and stop the thread; running parses finish on their own."""
        with self.cond:
            self.stopped = True
            left, self.waiting = self.waiting, []
            self._poke()
        for entry in left:
            try:
                datasets.mark_failed(entry.req.dataset_id, datasets.abandoned_problem())
            except Exception:  # noqa: BLE001 - the sweep fails it later
                log.warning("could not fail dataset %s at shutdown", entry.req.dataset_id)
            UploadDir(entry.req.dataset_id).remove()
            entry.done.set_result(None)


_lock = threading.Lock()
_dispatcher: _Dispatcher | None = None


def _get() -> _Dispatcher:
    global _dispatcher
    with _lock:
        if _dispatcher is None or _dispatcher.stopped:
            _dispatcher = _Dispatcher()
        return _dispatcher


def check_room(tenant_id: str) -> None:
    """429 ``ingest-busy`` when this tenant (or this process) has too many uploads waiting
    for a slot here; called before the body is read."""
    _get().check_room(tenant_id)


def submit(req: ingest_process.IngestRequest) -> Future[None]:
    """Queue the parse of an upload whose body is on disk and whose row is inserted; the
    future resolves once the parse has ended (its outcome is on the row) or was dropped."""
    return _get().submit(req)


def stop() -> None:
    """At API shutdown (see ``stop`` of the dispatcher)."""
    global _dispatcher
    with _lock:
        dispatcher, _dispatcher = _dispatcher, None
    if dispatcher is not None:
        dispatcher.stop()
