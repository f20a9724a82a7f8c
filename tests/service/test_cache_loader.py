"""The hot-path caches' loader: one lookup per key at a time, hot entries renewed before they
expire, invalidations never undone by a load that began before them."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.services.inference.cache import REFRESH_AFTER, Loader, TTLCache
from tests.fixtures.aio import run_async


class Lookups:
    """A blocking lookup (run on a worker thread, as the database's are) that counts its
    calls and can be held until released."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.calls = 0
        self.release = threading.Event()
        self.release.set()

    def __call__(self) -> object:
        self.calls += 1
        assert self.release.wait(10)
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


def _loader(value: object, held: bool = False
            ) -> tuple[TTLCache[object], Loader[object], Lookups]:
    """A loader over a fresh cache (60 s TTL; ``LookupError`` means gone) and a lookup that
    returns or raises ``value``, held until released when ``held``."""
    cache: TTLCache[object] = TTLCache(60.0)
    lookup = Lookups(value)
    if held:
        lookup.release.clear()
    return cache, Loader(cache, gone=(LookupError,)), lookup


def _age(cache: TTLCache, key: str, share: float) -> None:
    """Make ``key``'s entry ``share`` of the TTL old (its expiry moved, not the clock)."""
    _, value = cache._data[key]
    cache._data[key] = (time.monotonic() + (1.0 - share) * cache.ttl, value)


def test_concurrent_misses_of_one_key_share_one_lookup():
    # an expired hot key under load: the 50 requests in flight wait for one lookup, not 50
    cache, loader, lookup = _loader("entry", held=True)

    async def main() -> list[object]:
        waiting = [asyncio.ensure_future(loader.get("k", lookup)) for _ in range(50)]
        await asyncio.sleep(0.05)
        lookup.release.set()
        return await asyncio.gather(*waiting)

    assert run_async(main()) == ["entry"] * 50
    assert lookup.calls == 1 and cache.get("k") == "entry"


def test_a_hit_late_in_its_life_is_served_and_renewed_in_the_background():
    cache, loader, lookup = _loader("new")
    cache.put("k", "old")

    async def main() -> None:
        _age(cache, "k", REFRESH_AFTER / 2)  # young: no refresh
        assert await loader.get("k", lookup) == "old"
        await asyncio.sleep(0.05)
        assert lookup.calls == 0
        _age(cache, "k", 0.9)  # old: served at once, one refresh for all these hits
        lookup.release.clear()
        assert [await loader.get("k", lookup) for _ in range(20)] == ["old"] * 20
        lookup.release.set()
        for _ in range(200):
            if cache.get("k") == "new":
                break
            await asyncio.sleep(0.01)

    run_async(main())
    assert lookup.calls == 1 and cache.get("k") == "new"
    assert cache.lookup("k") == ("new", False)  # a whole TTL again


@pytest.mark.parametrize("gone", ["none", "error"])
def test_a_refresh_that_finds_the_entry_gone_drops_it(gone):
    # a revoked key (lookup returns None) or a deleted model (lookup raises a "gone" error)
    cache, loader, lookup = _loader(None if gone == "none" else LookupError("no such model"))
    cache.put("k", "live")
    _age(cache, "k", 0.9)

    async def main() -> None:
        assert await loader.get("k", lookup) == "live"  # the hit that starts the refresh
        for _ in range(200):
            if cache.get("k") is None:
                return
            await asyncio.sleep(0.01)

    run_async(main())
    assert cache.get("k") is None and lookup.calls == 1


def test_a_refresh_that_fails_otherwise_leaves_the_entry_to_its_ttl():
    # the database unreachable for a moment: the entry keeps serving until it expires
    cache, loader, lookup = _loader(ConnectionError("database unreachable"))
    cache.put("k", "live")
    _age(cache, "k", 0.9)

    async def main() -> object:
        first = await loader.get("k", lookup)
        await asyncio.sleep(0.1)
        return first

    assert run_async(main()) == "live"
    assert lookup.calls == 1 and cache.get("k") == "live"


def test_a_miss_whose_lookup_fails_raises_in_every_waiting_request():
    cache, loader, lookup = _loader(LookupError("no such model"), held=True)

    async def main() -> list[object]:
        waiting = [asyncio.ensure_future(loader.get("k", lookup)) for _ in range(5)]
        await asyncio.sleep(0.05)
        lookup.release.set()
        return await asyncio.gather(*waiting, return_exceptions=True)

    results = run_async(main())
    assert all(isinstance(r, LookupError) for r in results) and lookup.calls == 1
    assert cache.get("k") is None


def test_an_invalidation_during_a_load_is_not_undone_by_it():
    # the load read the key before it was revoked; the revocation's drop came while the load
    # was under way: what the load returns is handed to its requests but not cached
    cache, loader, lookup = _loader("read before the revocation", held=True)

    async def main() -> object:
        waiting = asyncio.ensure_future(loader.get("k", lookup))
        await asyncio.sleep(0.05)
        assert cache.drop(lambda _k, _v: True) == 0  # nothing cached yet, still a drop
        lookup.release.set()
        return await waiting

    assert run_async(main()) == "read before the revocation"
    assert cache.get("k") is None
    # a later load caches again
    assert run_async(loader.get("k", Lookups("fresh"))) == "fresh"
    assert cache.get("k") == "fresh"


def test_a_cancelled_request_does_not_cancel_the_lookup_others_wait_for():
    cache, loader, lookup = _loader("entry", held=True)

    async def main() -> object:
        leaving = asyncio.ensure_future(loader.get("k", lookup))
        staying = asyncio.ensure_future(loader.get("k", lookup))
        await asyncio.sleep(0.05)
        leaving.cancel()
        lookup.release.set()
        return await staying

    assert run_async(main()) == "entry"
    assert lookup.calls == 1 and cache.get("k") == "entry"
