"""Hostile HTTP clients against the API (issue 36, "bounded before parsing"): does one
client's request stall everyone else's?

Starts its own stack (``bench.service_load.Stack``: a fresh database, one uvicorn process
with this project's protocol, ``app.api.http_protocol``, one worker), trains a small model
(linear SODM on heart_scale), then starts a *peer* API process on the same database and
Redis running uvicorn's own httptools protocol (``--http httptools``: what served the API
before). Against each, with the default settings:

* ``one_huge_header``: one client sends a request whose header is ``--header-mb`` MB; how
  long ``/livez`` from another client waits meanwhile (the issue measured 20.8 s at 100 MB);
* one scenario per family, ``--clients`` attackers for ``--seconds``, each attacker from a
  loopback address of its own (127.0.1.x) and reconnecting whenever its connection ends:
  ``huge_headers`` (a header of ``--header-mb`` MB sent as fast as the server reads),
  ``slow_headers`` (a header byte a second), ``slow_bodies`` (``POST /predict`` with an
  attacker tenant's key declaring 1 MB and sending a byte a second), ``mixed`` (a third
  each), ``one_address`` (twice ``--clients`` slow-header connections from one address).
  The attackers run in a process of their own at ``--nice`` 10 (in life they are other
  machines; here they share the cores). Meanwhile a probe client (127.0.0.1, a thread of
  this process) sends ``GET /livez`` and a one-row ``POST /predict`` of another tenant
  alternately every 50 ms: p50 / p99 / max latency in ms and failures; the attackers'
  outcomes (answers by status; ``reset``, ``closed``: the connection ended without an
  answer; ``held``: still open when the scenario ended). After a scenario the bench waits
  until ``/livez`` answers within a second again (``recovery_s``).

    .venv/bin/python -m bench.http_edge                      # docs/reliability.md numbers
    .venv/bin/python -m bench.http_edge --seconds 10 --clients 10 --header-mb 20

Prints one JSON document. Everything runs on the same machine as the servers; the CI test
is ``tests/reliability/test_http_edge.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("huge_headers", "slow_headers", "slow_bodies", "mixed", "one_address")
CHUNK = 1 << 20


def attacker_address(i: int) -> str:
    """The loopback address of attacker ``i`` (Linux routes all of 127/8 to lo)."""
    return f"127.0.{1 + i // 250}.{1 + i % 250}"


async def _status(reader: asyncio.StreamReader) -> str:
    """The status of the answer the server sends, or how the connection ended."""
    try:
        line = await reader.readline()
    except (ConnectionError, OSError):
        return "reset"
    parts = line.split()
    return parts[1].decode() if len(parts) > 1 and line.startswith(b"HTTP/") else "closed"


async def _open(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _trickle(writer: asyncio.StreamWriter, answered: asyncio.Task, data: bytes,
                   interval: float, stop: asyncio.Event) -> None:
    """Send ``data`` a byte every ``interval`` s until answered, stopped or sent."""
    for i in range(len(data)):
        if answered.done() or stop.is_set():
            return
        writer.write(data[i:i + 1])
        await writer.drain()
        await asyncio.sleep(interval)


async def huge_header(port: int, source: str, stop: asyncio.Event, megabytes: float
                      ) -> str:
    """A request whose header is ``megabytes`` MB, sent as fast as the server reads."""
    reader, writer = await _open(port, source)
    answered = asyncio.create_task(_status(reader))
    try:
        writer.write(b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Big: ")
        block = b"a" * CHUNK
        for _ in range(int(megabytes * (1 << 20) / CHUNK)):
            if answered.done() or stop.is_set():
                break
            writer.write(block)
            await writer.drain()
        else:
            writer.write(b"\r\n\r\n")
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    return await _finish(writer, answered, stop)


async def slow_header(port: int, source: str, stop: asyncio.Event) -> str:
    """A request head sent a byte a second."""
    reader, writer = await _open(port, source)
    answered = asyncio.create_task(_status(reader))
    with contextlib.suppress(ConnectionError, OSError):
        await _trickle(writer, answered, b"GET /livez HTTP/1.1\r\nHost: x\r\n"
                       + b"X-Slow: " + b"s" * 10_000 + b"\r\n\r\n", 1.0, stop)
    return await _finish(writer, answered, stop)


async def slow_body(port: int, source: str, stop: asyncio.Event, key: str) -> str:
    """An authenticated ``POST /predict`` declaring 1 MB of body, sent a byte a second."""
    reader, writer = await _open(port, source)
    answered = asyncio.create_task(_status(reader))
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nAuthorization: Bearer " + key.encode()
                     + b"\r\nContent-Length: 1000000\r\n\r\n")
        await writer.drain()
        await _trickle(writer, answered, b"[" * 1_000_000, 1.0, stop)
    return await _finish(writer, answered, stop)


async def _finish(writer: asyncio.StreamWriter, answered: asyncio.Task,
                  stop: asyncio.Event) -> str:
    """The outcome: the answer's status (waited for until the scenario stops)."""
    waiting = asyncio.create_task(stop.wait())
    await asyncio.wait({answered, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    outcome = answered.result() if answered.done() else "held"
    answered.cancel()
    writer.transport.abort()
    return outcome


async def attack(make: Callable[[asyncio.Event], Awaitable[str]], stop: asyncio.Event,
                 outcomes: Counter[str]) -> None:
    """One attacker: ``make`` one hostile connection after another until ``stop``."""
    while not stop.is_set():
        try:
            outcomes[await make(stop)] += 1
        except (ConnectionError, OSError) as exc:
            outcomes[type(exc).__name__] += 1
            await asyncio.sleep(0.1)


def attackers(family: str, n: int, port: int, key: str, megabytes: float, first: int = 0
              ) -> list[Callable[[asyncio.Event], Awaitable[str]]]:
    """The ``n`` connection makers of a scenario, attacker ``i`` on the address of attacker
    ``first + i`` (scenarios run at the same time on addresses of their own)."""
    def one(kind: str, i: int) -> Callable[[asyncio.Event], Awaitable[str]]:
        source = attacker_address(first + i)
        if kind == "huge_headers":
            return lambda stop: huge_header(port, source, stop, megabytes)
        if kind == "slow_bodies":
            return lambda stop: slow_body(port, source, stop, key)
        return lambda stop: slow_header(port, source, stop)

    if family == "mixed":
        kinds = ("huge_headers", "slow_headers", "slow_bodies")
        return [one(kinds[i % 3], i) for i in range(n)]
    if family == "one_address":
        return [(lambda stop: slow_header(port, "127.0.9.9", stop)) for _ in range(2 * n)]
    return [one(family, i) for i in range(n)]


class Probe:
    """A thread alternating ``GET /livez`` and a one-row ``POST /predict`` every 50 ms."""

    def __init__(self, base: str, key: str, model_id: str, row: list[float],
                 timeout: float = 30.0) -> None:
        self.base, self.key, self.timeout = base, key, timeout
        self.body = {"model_id": model_id, "instances": [row]}
        self.times: dict[str, list[float]] = {"livez": [], "predict": []}
        self.failures: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=self.timeout, headers={
                "Authorization": f"Bearer {self.key}"}) as c:
            while not self._stop.is_set():
                for name, call in (("livez", lambda: c.get("/livez")),
                                   ("predict", lambda: c.post("/predict", json=self.body))):
                    t0 = time.perf_counter()
                    try:
                        ok = call().status_code == 200
                        if not ok:
                            self.failures[f"{name}: status"] += 1
                    except httpx.HTTPError as exc:
                        self.failures[f"{name}: {type(exc).__name__}"] += 1
                    self.times[name].append(time.perf_counter() - t0)
                time.sleep(0.05)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 10)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, values in self.times.items():
            v = np.asarray(values) * 1000 if values else np.asarray([np.nan])
            out[name] = {"n": len(values), "p50_ms": round(float(np.percentile(v, 50)), 1),
                         "p99_ms": round(float(np.percentile(v, 99)), 1),
                         "max_ms": round(float(v.max()), 1)}
        out["failures"] = dict(self.failures)
        return out


async def run_attackers(makers: list[Callable[[asyncio.Event], Awaitable[str]]],
                        seconds: float) -> Counter[str]:
    """The attackers for ``seconds``; their outcomes."""
    stop = asyncio.Event()
    outcomes: Counter[str] = Counter()
    tasks = [asyncio.create_task(attack(m, stop, outcomes)) for m in makers]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    return outcomes


def _attack_process(family: str, n: int, port: int, key: str, megabytes: float,
                    seconds: float, nice: int, conn: Connection) -> None:
    """A process of its own for the attackers (their CPU is not the probe's), at a lower
    priority (``nice``): attackers are other machines in life."""
    os.nice(nice)
    makers = attackers(family, n, port, key, megabytes)
    conn.send(dict(asyncio.run(run_attackers(makers, seconds))))
    conn.close()


def run_scenario(family: str, n: int, port: int, key: str, megabytes: float,
                 probe: Probe, seconds: float, nice: int) -> dict[str, Any]:
    """The attackers of ``family`` in their own process while ``probe`` measures."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_attack_process, args=(family, n, port, key, megabytes,
                                                     seconds, nice, theirs))
    with probe:
        proc.start()
        outcomes = ours.recv() if ours.poll(seconds + 120) else {"no report": 1}
        proc.join(30)
    return {"probe": probe.report(), "attackers": len(attackers(family, n, port, key, 0)),
            "outcomes": outcomes}


def wait_recovered(base: str, limit: float = 600.0) -> float:
    """Seconds until ``/livez`` answers within a second again."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        with contextlib.suppress(httpx.HTTPError):
            t = time.perf_counter()
            if httpx.get(base + "/livez", timeout=30).status_code == 200 \
                    and time.perf_counter() - t < 1.0:
                break
        time.sleep(0.2)
    return round(time.perf_counter() - t0, 1)


def one_huge_header(base: str, port: int, megabytes: float) -> dict[str, Any]:
    """``/livez`` from another client while one ``megabytes`` MB header is sent."""
    async def go() -> dict[str, Any]:
        stop = asyncio.Event()
        livez: list[float] = []

        def probe() -> None:
            with httpx.Client(timeout=120) as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    with contextlib.suppress(httpx.HTTPError):
                        c.get(base + "/livez")
                    livez.append(time.perf_counter() - t0)
                    time.sleep(0.05)

        thread = threading.Thread(target=probe, daemon=True)
        thread.start()
        t0 = time.perf_counter()
        outcome = await huge_header(port, attacker_address(0), asyncio.Event(), megabytes)
        seconds = time.perf_counter() - t0
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.to_thread(thread.join, 130)
        return {"megabytes": megabytes, "outcome": outcome, "seconds": round(seconds, 2),
                "livez_max_ms": round(1000 * max(livez, default=float("nan")), 1),
                "livez_n": len(livez)}

    return asyncio.run(go())


def measure(name: str, base: str, port: int, key: str, probe_key: str, model_id: str,
            row: list[float], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"server": name}
    out["one_huge_header"] = one_huge_header(base, port, args.header_mb)
    out["one_huge_header"]["recovery_s"] = wait_recovered(base)
    print(json.dumps({name: out["one_huge_header"]}), file=sys.stderr)
    for family in args.families:
        probe = Probe(base, probe_key, model_id, row)
        report = run_scenario(family, args.clients, port, key, args.header_mb, probe,
                              args.seconds, args.nice)
        report["recovery_s"] = wait_recovered(base)
        out[family] = report
        print(json.dumps({name: {family: report}}), file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="per scenario")
    ap.add_argument("--clients", type=int, default=50, help="attackers per scenario")
    ap.add_argument("--header-mb", type=float, default=100.0)
    ap.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--servers", nargs="*", default=["peer", "sodm"], choices=["peer", "sodm"])
    ap.add_argument("--nice", type=int, default=10, help="added to the attackers' niceness")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import create_key
    from bench.service_load import Stack, upload_libsvm, wait_jobs
    from tests.fixtures.stack import ApiServer

    out: dict[str, Any] = {"args": vars(args), "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="sodm-edge-") as tmp:
        stack = Stack(Path(tmp), 1)
        peer = None
        try:
            with httpx.Client(base_url=stack.api.url, timeout=300,
                              headers={"Authorization": f"Bearer {stack.key}"}) as c:
                ds = upload_libsvm(c, "heart_scale")
                job = c.post("/train", json={"dataset_id": ds["id"], "algorithm": "sodm",
                                             "params": {"kernel": "linear"}}).json()
                job = wait_jobs(c, [job["id"]], 600)[job["id"]]
                assert job["state"] == "SUCCEEDED", job
            row = [random.Random(0).uniform(-1, 1) for _ in range(ds["n_features"])]
            with session_scope() as s:
                _, attacker_key = create_key(s, "attacker")
            env = {**os.environ, **stack.env}
            servers = {"sodm": stack.api}
            if "peer" in args.servers:
                peer = ApiServer(env, Path(tmp) / "peer.log", ["--http", "httptools"])
                peer.wait_live()
                servers["peer"] = peer
            for name in args.servers:
                server = servers[name]
                out[name] = measure(name, server.url, server.port, attacker_key, stack.key,
                                    job["model_id"], row, args)
        finally:
            if peer is not None:
                peer.stop()
            stack.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
