"""Bounded TTL caches of the request hot path: API keys and model rows.

Entries live at most ``ttl`` seconds (``SODM_AUTH_CACHE_SECONDS``,
``SODM_MODEL_ROW_CACHE_SECONDS``), the oldest are dropped beyond ``max_entries``, and
``app.services.inference.invalidation`` removes entries in every API process as soon as a key is
revoked or a model deleted or added: the TTL is the bound when a message is lost.

:class:`Loader` fills a cache from a blocking lookup without a thundering herd: concurrent
misses of one key share one lookup, and a hit in the second half of its entry's life starts
one background refresh, so a hot entry is renewed before it expires instead of sending every
request in flight at that moment to the database (under load that herd was the latency tail
of ``/predict``, docs/serving.md). A refresh never extends what the database no longer
confirms, and a load that began before an invalidation cannot put back what it removed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.core.problems import ProblemError

V = TypeVar("V")

# a hit past this share of its entry's lifetime starts a background refresh (Loader)
REFRESH_AFTER = 0.5


class TTLCache(Generic[V]):
    """A thread-safe dict whose entries expire ``ttl`` seconds after they were put."""

    def __init__(self, ttl: float, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._data: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        # bumped by every drop and clear: a put made for a load that began before one is
        # ignored (it may carry what the invalidation removed)
        self.generation = 0

    def get(self, key: Hashable) -> V | None:
        return self.lookup(key)[0]

    def lookup(self, key: Hashable) -> tuple[V | None, bool]:
        """The live value of ``key`` (or ``None``) and whether it is due for a refresh
        (older than ``REFRESH_AFTER`` of the TTL)."""
        if self.ttl <= 0:
            return None, False
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return None, False
            left = hit[0] - time.monotonic()
            if left <= 0:
                del self._data[key]
                return None, False
            return hit[1], left < (1.0 - REFRESH_AFTER) * self.ttl

    def put(self, key: Hashable, value: V, generation: int | None = None) -> None:
        """Store ``value``; ignored when ``generation`` is given and a drop or clear came
        after it was read."""
        if self.ttl <= 0:
            return
        with self._lock:
            if generation is not None and generation != self.generation:
                return
            self._data[key] = (time.monotonic() + self.ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def drop(self, match: Callable[[Hashable, V], bool]) -> int:
        """Remove every entry for which ``match(key, value)``; returns how many."""
        with self._lock:
            self.generation += 1
            gone = [k for k, (_, v) in self._data.items() if match(k, v)]
            for k in gone:
                del self._data[k]
            return len(gone)

    def discard(self, key: Hashable) -> None:
        """Remove ``key`` (a lookup found it gone; other keys' loads are unaffected)."""
        with self._lock:
            self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class Loader(Generic[V]):
    """Reads through a :class:`TTLCache` with a blocking ``lookup`` run on a worker thread
    (module docstring): one lookup per key at a time, shared by every request that misses,
    and hot entries refreshed in the background before they expire.

    ``lookup`` returns the value, or ``None`` when there is none (a revoked key); an
    exception of a ``gone`` type means the same for a refresh (a deleted model) and reaches
    the callers of a miss. Any other exception of a refresh leaves the entry to its TTL.
    """

    def __init__(self, cache: TTLCache[V], gone: tuple[type[BaseException], ...] = ()) -> None:
        self.cache = cache
        self.gone = gone
        self._inflight: dict[Hashable, asyncio.Task[V | None]] = {}

    async def get(self, key: Hashable, lookup: Callable[[], V | None]) -> V | None:
        value, due = self.cache.lookup(key)
        if value is not None:
            if due:
                self.refresh(key, lookup)
            return value
        return await self.load(key, lookup)

    async def load(self, key: Hashable, lookup: Callable[[], V | None]) -> V | None:
        """The looked-up value, joining a lookup of ``key`` already under way."""
        # shielded: a request that is cancelled does not cancel the others' lookup
        return await asyncio.shield(self.refresh(key, lookup))

    def refresh(self, key: Hashable, lookup: Callable[[], V | None]) -> asyncio.Task[V | None]:
        """Start a lookup of ``key`` unless one is under way; the task either way (held in
        ``_inflight`` until it is done: the event loop keeps only weak references)."""
        loop = asyncio.get_running_loop()
        task = self._inflight.get(key)
        if task is not None and task.get_loop() is loop and not task.done():
            return task
        generation = self.cache.generation
        task = loop.create_task(self._run(key, lookup, generation))
        self._inflight[key] = task
        task.add_done_callback(lambda t: self._finished(key, t))
        return task

    async def _run(self, key: Hashable, lookup: Callable[[], V | None], generation: int
                   ) -> V | None:
        from starlette.concurrency import run_in_threadpool

        try:
            value = await run_in_threadpool(lookup)
        except self.gone:
            self.cache.discard(key)
            raise
        if value is None:
            self.cache.discard(key)
        else:
            self.cache.put(key, value, generation)
        return value

    def _finished(self, key: Hashable, task: asyncio.Task[V | None]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved: a refresh nobody awaits fails quietly


@dataclass(frozen=True)
class KeyEntry:
    """What authentication needs of a live key (never the key itself)."""

    key_id: str
    key_hash: str
    prefix: str
    tenant_id: str
    tenant_name: str
    tenant_created_at: Any


@dataclass(frozen=True)
class ModelEntry:
    """What prediction needs of a model row."""

    id: str
    tenant_id: str
    name: str
    version: int
    n_features: int
    file_sha256: str
    feature_names: tuple[str, ...] | None = None


_keys: TTLCache[KeyEntry] | None = None
_models: TTLCache[ModelEntry] | None = None
_loaders: dict[str, Loader[Any]] = {}


def keys() -> TTLCache[KeyEntry]:
    global _keys
    if _keys is None:
        from app.core.config import get_settings

        _keys = TTLCache(get_settings().auth_cache_seconds)
    return _keys


def models() -> TTLCache[ModelEntry]:
    global _models
    if _models is None:
        from app.core.config import get_settings

        _models = TTLCache(get_settings().model_row_cache_seconds)
    return _models


def key_loader() -> Loader[KeyEntry]:
    """Reads through :func:`keys` (a ``None`` lookup: no such live key)."""
    return _loader_of("keys", keys(), ())


def model_loader() -> Loader[ModelEntry]:
    """Reads through :func:`models` (a ``ProblemError`` lookup: the reference names no
    model, or no longer does)."""
    return _loader_of("models", models(), (ProblemError,))


def _loader_of(name: str, cache: TTLCache[V], gone: tuple[type[BaseException], ...]
               ) -> Loader[V]:
    """The loader of ``cache`` (a new one when the cache was replaced, as tests do)."""
    loader = _loaders.get(name)
    if loader is None or loader.cache is not cache:
        loader = _loaders[name] = Loader(cache, gone)
    return loader


def clear() -> None:
    """Empty both caches (after a lost invalidation subscription: messages may be missed)."""
    keys().clear()
    models().clear()


def reset() -> None:
    """Forget both caches and their settings (tests change the environment)."""
    global _keys, _models
    _keys = _models = None
    _loaders.clear()
