"""Model evaluations of an API process: a bounded pool and adaptive micro-batching.

Every evaluation runs on one of ``slots`` threads (``SODM_PREDICT_THREADS``, default: the
process's cores divided by the API worker processes), each with BLAS limited to one thread,
so concurrent requests never run more kernel sums than there are cores.

Small requests (up to ``SODM_PREDICT_BATCH_ROWS`` rows, dense) for the same model are summed
together: a request joins its model's queue; whenever an evaluation slot is free, everything
queued for the model (up to the row cap) becomes one matrix and one kernel pass, and the
decision values are split back per request. The wait is adaptive: a lone request starts at
once; only while other ``/predict`` requests are being read or parsed does a batch wait for
them, at most ``SODM_PREDICT_BATCH_WAIT_MS`` (2 ms by default) after its first request
arrived. Requests pile up naturally while all slots are busy, so the batch grows with the
load. This is BentoML's adaptive batching and Triton's dynamic batcher, in a few lines.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.core.cores import available_cores
from app.core.observability import PREDICT_BATCH


def default_slots(workers: int) -> int:
    """Cores available to this process divided by the API worker processes (at least 1)."""
    return max(1, available_cores() // max(1, workers))


class ClientGone(Exception):
    """The client closed the connection before its evaluation started."""


@dataclass
class _Item:
    X: np.ndarray
    future: asyncio.Future
    arrived: float


@dataclass
class _Queue:
    items: deque[_Item] = field(default_factory=deque)
    draining: bool = False
    more: asyncio.Event = field(default_factory=asyncio.Event)


class Evaluations:
    """The evaluation slots and per-model batch queues of one process (one event loop)."""

    def __init__(self, slots: int, max_wait_s: float, max_batch_rows: int) -> None:
        self.slots = slots
        self.max_wait_s = max_wait_s
        self.max_batch_rows = max_batch_rows
        # BLAS runs on one thread: the API process's lifespan sets it (app.main)
        self.pool = ThreadPoolExecutor(slots, thread_name_prefix="predict")
        self._free = asyncio.Semaphore(slots)
        self._queues: dict[Any, _Queue] = {}
        self.arriving = 0  # /predict requests being read or parsed right now

    async def run(self, fn: Callable[..., Any], *args: Any,
                  wanted: Callable[[], Awaitable[bool]] | None = None) -> Any:
        """Run ``fn(*args)`` on a free slot (model loads, large or sparse requests); when
        ``wanted()`` says no once the slot is free (the client left), ``ClientGone``."""
        async with self._free:
            if wanted is not None and not await wanted():
                raise ClientGone
            return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)

    async def decision(self, key: Any, fn: Callable[[np.ndarray], np.ndarray],
                       X: np.ndarray, wanted: Callable[[], Awaitable[bool]] | None = None
                       ) -> np.ndarray:
        """``fn(X)``, possibly computed together with other requests' rows for ``key``;
        a large request alone, skipped if ``wanted()`` is false when its turn comes."""
        if X.shape[0] >= self.max_batch_rows or not isinstance(X, np.ndarray):
            return await self.run(fn, X, wanted=wanted)
        loop = asyncio.get_running_loop()
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = _Queue()
        item = _Item(X, loop.create_future(), time.monotonic())
        q.items.append(item)
        q.more.set()
        if not q.draining:
            q.draining = True
            loop.create_task(self._drain(key, q, fn))
        return await item.future

    async def _drain(self, key: Any, q: _Queue, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        loop = asyncio.get_running_loop()
        try:
            while q.items:
                await self._free.acquire()
                try:
                    await self._gather(q)
                    batch = self._take(q)
                except BaseException:
                    self._free.release()
                    raise
                if not batch:
                    self._free.release()
                    continue
                loop.create_task(self._evaluate(fn, batch))
        finally:
            q.draining = False
            if q.items:  # arrived after the loop ended
                q.draining = True
                loop.create_task(self._drain(key, q, fn))
            elif self._queues.get(key) is q:
                del self._queues[key]

    async def _gather(self, q: _Queue) -> None:
        """Wait (bounded) for requests that are being parsed right now to join."""
        if self.max_wait_s <= 0 or not q.items:
            return
        deadline = q.items[0].arrived + self.max_wait_s
        while self.arriving > 0 and self._rows(q) < self.max_batch_rows:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            q.more.clear()
            try:
                await asyncio.wait_for(q.more.wait(), left)
            except TimeoutError:
                return

    def _rows(self, q: _Queue) -> int:
        return sum(it.X.shape[0] for it in q.items)

    def _take(self, q: _Queue) -> list[_Item]:
        batch: list[_Item] = []
        rows = 0
        while q.items and (not batch or rows + q.items[0].X.shape[0] <= self.max_batch_rows):
            it = q.items.popleft()
            if it.future.cancelled():
                continue
            batch.append(it)
            rows += it.X.shape[0]
        return batch

    async def _evaluate(self, fn: Callable[[np.ndarray], np.ndarray],
                        batch: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        try:
            X = batch[0].X if len(batch) == 1 else np.concatenate([it.X for it in batch])
            F = await loop.run_in_executor(self.pool, fn, X)
        except BaseException as exc:  # noqa: BLE001 - handed to every waiting request
            for it in batch:
                if not it.future.done():
                    it.future.set_exception(exc)
            return
        finally:
            self._free.release()
        PREDICT_BATCH.observe(len(batch))
        start = 0
        for it in batch:
            n = it.X.shape[0]
            if not it.future.done():
                it.future.set_result(F[start:start + n])
            start += n


_current: tuple[asyncio.AbstractEventLoop, Evaluations] | None = None


def evaluations() -> Evaluations:
    """This process's evaluator, bound to the running event loop (created on first use)."""
    global _current
    loop = asyncio.get_running_loop()
    if _current is None or _current[0] is not loop:
        from app.core.config import get_settings

        s = get_settings()
        # SODM_API_WORKERS: set by sodm serve / sodm run for their processes (0: one)
        slots = s.predict_threads or default_slots(s.api_workers or 1)
        if _current is not None:
            _current[1].pool.shutdown(wait=False)
        _current = (loop, Evaluations(slots, s.predict_batch_wait_ms / 1000.0,
                                      s.predict_batch_rows))
    return _current[1]
