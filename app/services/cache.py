"""Bounded TTL caches of the request hot path: API keys and model rows.

Entries live at most ``ttl`` seconds (``SODM_AUTH_CACHE_SECONDS``,
``SODM_MODEL_ROW_CACHE_SECONDS``), the oldest are dropped beyond ``max_entries``, and
``app.services.invalidation`` removes entries in every API process as soon as a key is
revoked or a model deleted or added: the TTL is the bound when a message is lost.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class TTLCache(Generic[V]):
    """A thread-safe dict whose entries expire ``ttl`` seconds after they were put."""

    def __init__(self, ttl: float, max_entries: int = 10_000) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._data: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        if self.ttl <= 0:
            return None
        with self._lock:
            hit = self._data.get(key)
            if hit is None:
                return None
            if hit[0] <= time.monotonic():
                del self._data[key]
                return None
            return hit[1]

    def put(self, key: Hashable, value: V) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._data[key] = (time.monotonic() + self.ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def drop(self, match: Callable[[Hashable, V], bool]) -> int:
        """Remove every entry for which ``match(key, value)``; returns how many."""
        with self._lock:
            gone = [k for k, (_, v) in self._data.items() if match(k, v)]
            for k in gone:
                del self._data[k]
            return len(gone)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


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
    file_path: str
    file_sha256: str
    feature_names: tuple[str, ...] | None = None


_keys: TTLCache[KeyEntry] | None = None
_models: TTLCache[ModelEntry] | None = None


def keys() -> TTLCache[KeyEntry]:
    global _keys
    if _keys is None:
        from app.config import get_settings

        _keys = TTLCache(get_settings().auth_cache_seconds)
    return _keys


def models() -> TTLCache[ModelEntry]:
    global _models
    if _models is None:
        from app.config import get_settings

        _models = TTLCache(get_settings().model_row_cache_seconds)
    return _models


def clear() -> None:
    """Empty both caches (after a lost invalidation subscription: messages may be missed)."""
    keys().clear()
    models().clear()


def reset() -> None:
    """Forget both caches and their settings (tests change the environment)."""
    global _keys, _models
    _keys = _models = None
