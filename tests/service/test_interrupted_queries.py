"""Celery's soft time limit is an exception raised from a signal handler, so it can land in
the middle of a database call. On the real Postgres: ``session_scope`` then propagates the
limit, or a database error with the limit in its chain (psycopg raises "another command is
already in progress" when the interrupted command's cleanup runs into it), never a database
error without it (which the runner reads as "database unreachable" and leaves the job to the
reaper); the pool keeps no broken connection; and a job interrupted that way ends FAILED
``time-limit`` on its first attempt."""

from __future__ import annotations

import random
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import select, text

from tests.service.jobs_helpers import submit, upload


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


ROUNDS = 50  # rounds of one interruption before giving up


@contextmanager
def soft_limit_after(seconds: float) -> Iterator[None]:
    """SIGALRM raises ``SoftTimeLimitExceeded`` after ``seconds``, as billiard's handler does."""

    def fire(*_: Any) -> None:
        raise SoftTimeLimitExceeded()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _query_until_interrupted(rng: random.Random) -> None:
    """Short queries in one transaction until the soft limit lands in one of them. A limit
    raised inside a finalizer is swallowed by Python ("Exception ignored in ..."); the round
    is then run again with a new timer (a bounded number of times: a limit that never lands
    fails the test instead of hanging it)."""
    from app.core.db import session_scope

    for _ in range(ROUNDS):
        with soft_limit_after(rng.uniform(0.0005, 0.02)), session_scope() as s:
            for k in range(100_000):
                assert s.execute(text("select :k"), {"k": k}).scalar() == k
    raise AssertionError(f"the soft limit never landed in a query ({ROUNDS} rounds)")


def test_an_interrupted_transaction_raises_the_limit_and_leaves_the_pool_sound(
        stack_env: dict[str, str]) -> None:
    from app.core.db import session_scope

    rng = random.Random(0)
    raised: list[BaseException] = []
    for _ in range(120):
        try:
            _query_until_interrupted(rng)
        except BaseException as exc:  # noqa: BLE001 - every outcome is inspected below
            raised.append(exc)
        with session_scope() as s:  # the next transaction gets a working connection
            assert s.execute(text("select 4242")).scalar() == 4242
    assert len(raised) == 120
    # the runner takes an OperationalError without the limit in its chain for an unreachable
    # database (job left RUNNING): every error raised here carries the limit
    assert all(any(isinstance(e, SoftTimeLimitExceeded) for e in _chain(exc))
               for exc in raised)
    # most interruptions propagate the limit itself (the rollback's failure is not raised)
    assert sum(isinstance(exc, SoftTimeLimitExceeded) for exc in raised) > len(raised) // 2


def test_a_job_interrupted_inside_a_query_fails_with_time_limit(
        api: Any, datasets_dir: Any, private_queue: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from app.core.db import session_scope
    from app.core.orm import Job, JobState
    from worker import runner
    from worker.lifecycle import lease

    def interrupted_run(*_: Any) -> str:
        _query_until_interrupted(rng)
        raise AssertionError("not interrupted")

    rng = random.Random(1)
    monkeypatch.setattr(runner, "_run", interrupted_run)
    ds = upload(api, datasets_dir, "heart_scale")
    states: list[tuple[str, int, str]] = []
    for _ in range(6):
        job_id = submit(api, {"dataset_id": ds["id"], "algorithm": "sodm",
                              "params": {"kernel": "linear"}})["id"]
        claimed = lease.claim(job_id)
        assert claimed is not None and claimed.attempt == 1
        outcome = runner.run_claimed(claimed)
        with session_scope() as s:
            job = s.scalars(select(Job).where(Job.id == job_id)).one()
            states.append((outcome, job.attempt, (job.error or {}).get("type", "")))
    assert all(o == JobState.FAILED and a == 1 and t.endswith("/time-limit")
               for o, a, t in states), states

