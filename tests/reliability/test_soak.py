"""Opt-in soak test (SODM_SOAK=1; a few minutes): 500 small jobs on two workers
while pool children are SIGKILLed at random; every job ends in exactly one terminal state
with a model iff it SUCCEEDED, and none is left RUNNING or QUEUED."""

from __future__ import annotations

import os
import random
import signal
import time

import httpx
import pytest
from sqlalchemy import text

from tests.service.jobs_helpers import TERMINAL

pytestmark = pytest.mark.skipif(os.environ.get("SODM_SOAK") != "1",
                                reason="soak test: set SODM_SOAK=1 (500 jobs, about 2 min here)")

JOBS = int(os.environ.get("SODM_SOAK_JOBS", "500"))


def test_soak_with_random_worker_kills(client: httpx.Client, start_worker, heart, db) -> None:
    workers = [start_worker(), start_worker()]
    ids = [client.post("/train", json={"dataset_id": heart["id"], "algorithm": "sodm",
                                       "params": {"kernel": "linear"}, "seed": i,
                                       "test_fraction": 0.2}).json()["id"]
           for i in range(JOBS)]
    rng = random.Random(7)
    kills = 0
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        with db.connect() as c:
            open_jobs = c.execute(text("select count(*) from jobs where id = any(:ids) and "
                                       "state not in ('SUCCEEDED','FAILED','CANCELLED')"),
                                  {"ids": ids}).scalar()
        if open_jobs == 0:
            break
        time.sleep(rng.uniform(1, 4))
        children = [ch for w in workers for ch in w.children()]
        if children and kills < JOBS // 10:
            os.kill(rng.choice(children).pid, signal.SIGKILL)
            kills += 1
    with db.connect() as c:
        rows = c.execute(text("select j.id, j.state, count(m.id) from jobs j left join "
                              "models m on m.job_id = j.id where j.id = any(:ids) "
                              "group by j.id, j.state"), {"ids": ids}).all()
    assert len(rows) == JOBS and kills > 0
    for job_id, state, models in rows:
        assert state in TERMINAL, (job_id, state)
        assert models == (1 if state == "SUCCEEDED" else 0), (job_id, state, models)
