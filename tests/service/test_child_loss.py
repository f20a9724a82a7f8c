"""``worker.lifecycle.child_loss.release_dead_child`` on the real Postgres: the job a dead pool
child held goes back to QUEUED (attempt kept), FAILED worker-lost when out of attempts, CANCELLED
when a cancel was asked, FAILED time-limit after the hard limit; a row that is no longer the
dead child's (taken by another worker, finished) is left alone. The whole path (a SIGKILLed
child, the requeued message claimed at once) is
``tests/service/test_worker_faults.py::test_killed_child_retried_and_succeeds_once``."""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import delete

from app.core.db import session_scope
from app.core.orm import Dataset, Job, JobState, utcnow
from worker.lifecycle.child_loss import release_dead_child

PID = 4_000_000  # above pid_max: no live process of this host has it


@pytest.fixture
def held(tenant):
    """Factory: a job row as pool child ``PID`` of this host holds it."""
    made: list[str] = []
    with session_scope() as s:
        ds = Dataset(tenant_id=tenant[0], name="held", format="libsvm", storage_path="-",
                     n_rows=1, n_features=1, classes={}, sparse=False, size_bytes=0)
        s.add(ds)
        s.flush()
        ds_id = ds.id

    def make(state: JobState, attempt: int = 1, worker: str | None = None) -> str:
        with session_scope() as s:
            job = Job(tenant_id=tenant[0], dataset_id=ds_id, algorithm="odm",
                      backend="local", request={}, params={}, model_name="held",
                      state=state, attempt=attempt, max_attempts=3, history=[],
                      worker=worker or f"{socket.gethostname()}:{PID}",
                      lease_until=utcnow() + timedelta(seconds=600))
            s.add(job)
            s.flush()
            made.append(job.id)
            return job.id

    yield make
    with session_scope() as s:
        s.execute(delete(Job).where(Job.id.in_(made)))
        s.execute(delete(Dataset).where(Dataset.id == ds_id))


def _row(job_id: str) -> Job:
    with session_scope() as s:
        job = s.get(Job, job_id)
        s.expunge(job)
        return job


def test_a_dead_childs_jobs_are_released_at_once(held) -> None:
    running, last, cancelling, timed = (held(JobState.RUNNING), held(JobState.RUNNING, 3),
                                        held(JobState.CANCELLING), held(JobState.RUNNING))
    other = held(JobState.RUNNING, worker="elsewhere:1")
    done = held(JobState.SUCCEEDED)
    assert release_dead_child(running, PID)["requeued"] == [running]
    job = _row(running)
    assert (job.state, job.attempt, job.worker, job.lease_until) == \
        (JobState.QUEUED, 1, None, None) and job.enqueued_at is not None
    assert release_dead_child(last, PID)["failed"] == [last]
    assert _row(last).error["type"].endswith("/worker-lost")
    assert release_dead_child(cancelling, PID)["cancelled"] == [cancelling]
    assert release_dead_child(timed, PID, timed_out=True)["timed_out"] == [timed]
    job = _row(timed)
    assert job.state == JobState.FAILED and job.error["type"].endswith("/time-limit")
    # not the dead child's row, or already finished: untouched
    for job_id in (other, done):
        assert not any(release_dead_child(job_id, PID).values())
    assert _row(other).state == JobState.RUNNING and _row(done).state == JobState.SUCCEEDED
    assert not any(release_dead_child(str(uuid.uuid4()), PID).values())
