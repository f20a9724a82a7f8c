"""Leases are measured by the database's clock (``worker.lifecycle.lease.db_now``): a worker whose
own clock is an hour off writes, extends and judges leases exactly like one whose clock is
right. The skew is simulated by shifting this process's ``utcnow`` (the real Postgres
answers ``now()``); no worker consumes this module's queue, so the job waits for the
in-process claim."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import select, text, update

from tests.service.jobs_helpers import libsvm_bytes


def _db_seconds_until(session, job_id: str) -> float:
    return float(session.execute(text(
        "select extract(epoch from lease_until - now()) from jobs where id = :j"),
        {"j": job_id}).scalar())


def _queued_job(api_server: str, tenant: tuple[str, str], datasets_dir) -> str:
    """A linear SODM job on heart_scale, queued (no worker consumes this module's queue)."""
    auth = {"Authorization": f"Bearer {tenant[1]}"}
    ds = httpx.post(api_server + "/datasets", headers=auth, timeout=60,
                    files={"file": ("h.libsvm", libsvm_bytes(datasets_dir, "heart_scale"))},
                    data={"format": "libsvm"}).json()
    return httpx.post(api_server + "/train", headers=auth, timeout=60,
                      json={"dataset_id": ds["id"], "algorithm": "sodm",
                            "params": {"kernel": "linear"}}).json()["id"]


def test_leases_follow_the_database_clock(api_server, tenant, datasets_dir, monkeypatch):
    from app.core.config import get_settings
    from app.core.db import session_scope
    from app.core.orm import Job, JobState, utcnow
    from worker.lifecycle import lease, reaper

    job_id = _queued_job(api_server, tenant, datasets_dir)
    lease_s = get_settings().job_lease_seconds
    for skew in (timedelta(hours=1), -timedelta(hours=1)):
        monkeypatch.setattr(lease, "utcnow", lambda skew=skew: utcnow() + skew)
        monkeypatch.setattr(reaper, "utcnow", lambda skew=skew: utcnow() + skew)
        with session_scope() as s:
            s.execute(update(Job).where(Job.id == job_id).values(
                state=JobState.QUEUED, attempt=0, lease_until=None, worker=None))
        c = lease.claim(job_id)
        assert c is not None and c.attempt == 1
        with session_scope() as s:
            assert abs(_db_seconds_until(s, job_id) - lease_s) < 5
            s.execute(text("update jobs set lease_until = now() + interval '2 seconds' "
                           "where id = :j"), {"j": job_id})
        hb = lease.Heartbeat(c)
        hb.beat()  # extends by the lease from the database's now
        assert not hb.lost.is_set()
        with session_scope() as s:
            assert abs(_db_seconds_until(s, job_id) - lease_s) < 5
        # an unexpired lease (by the database's clock) is not reaped, whatever ours says
        out = reaper.reap_once()
        assert job_id not in out["requeued"] + out["failed"]
        with session_scope() as s:
            assert s.scalar(select(Job.state).where(Job.id == job_id)) == JobState.RUNNING
            s.execute(text("update jobs set lease_until = now() - interval '1 second' "
                           "where id = :j"), {"j": job_id})
        assert job_id in reaper.reap_once()["requeued"]
    with session_scope() as s:
        s.execute(update(Job).where(Job.id == job_id).values(state=JobState.CANCELLED,
                                                             lease_until=None))


def test_a_beat_after_the_attempts_own_finish_is_quiet(api_server, tenant, datasets_dir,
                                                       caplog):
    """The heartbeat can beat between the runner's terminal write and its stop: that row is
    this attempt's own result, not a lost lease (no warning, ``lost`` unset); a row that the
    reaper re-queued is lost."""
    from app.core.db import session_scope
    from app.core.orm import Job, JobState
    from worker.lifecycle import lease
    from worker.lifecycle.job_state import finish

    job_id = _queued_job(api_server, tenant, datasets_dir)
    c = lease.claim(job_id)
    assert c is not None
    assert finish(c, JobState.CANCELLED)
    hb = lease.Heartbeat(c)
    with caplog.at_level("WARNING", logger="worker.lifecycle.lease"):
        hb.beat()
    assert not hb.lost.is_set() and hb._stop_event.is_set()
    assert "no longer ours" not in caplog.text

    with session_scope() as s:  # as the reaper leaves it: queued again, the attempt gone
        s.execute(update(Job).where(Job.id == job_id).values(
            state=JobState.QUEUED, worker=None, lease_until=None, finished_at=None))
    hb = lease.Heartbeat(c)
    with caplog.at_level("WARNING", logger="worker.lifecycle.lease"):
        hb.beat()
    assert hb.lost.is_set() and "no longer ours (state QUEUED)" in caplog.text
    with session_scope() as s:
        s.execute(update(Job).where(Job.id == job_id).values(state=JobState.CANCELLED))
