"""The per-job memory limit (``SODM_JOB_MEMORY_LIMIT_MB``, ``worker.lifecycle.memory``): a job past
it ends FAILED ``memory-limit`` on its first attempt and the same pool child runs the next job."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.reliability.conftest import one
from tests.service.jobs_helpers import submit, upload_as, wait_job, wait_no_delivery


@pytest.fixture(scope="module")
def a9a(api_server, tenant, datasets_dir):
    """32,561 rows: an exact rbf kernel of its training rows needs gigabytes."""
    return upload_as(api_server, tenant, datasets_dir, "a9a")


def test_memory_limit_fails_the_job_and_the_child_lives_on(client, start_worker, a9a, heart,
                                                           db, stack_env):
    """A 256 MB limit and a job whose 2 GB kernel cache cannot be mapped: FAILED
    memory-limit, attempt 1, no model, no redelivery; the same pool child then trains
    another job to SUCCEEDED."""
    w = start_worker(SODM_JOB_MEMORY_LIMIT_MB="256")
    (child,) = w.children()
    job = submit(client, {"dataset_id": a9a["id"], "algorithm": "odm",
                          "params": {"kernel": "rbf", "cache_size": 2048, "max_iter": 1},
                          "test_fraction": 0.2})
    done = wait_job(client, job["id"], {"FAILED"}, timeout=300)
    err = done["error"]
    assert err["type"].endswith("/memory-limit"), err
    assert "256 MB" in err["detail"] and "SODM_JOB_MEMORY_LIMIT_MB" in err["detail"], err
    assert done["attempt"] == 1 and done["model_id"] is None
    assert one(db, "select count(*) from models where job_id = :j", j=job["id"]) == 0
    wait_no_delivery(stack_env["CELERY_BROKER_URL"], stack_env["SODM_CELERY_QUEUE"], job["id"])
    assert client.get(f"/jobs/{job['id']}").json()["attempt"] == 1

    ok = submit(client, {"dataset_id": heart["id"], "algorithm": "odm",
                         "params": {"kernel": "rbf"}, "test_fraction": 0.2})
    after = wait_job(client, ok["id"], timeout=300)
    assert after["state"] == "SUCCEEDED" and after["attempt"] == 1, after["error"]
    assert w.children() == [child] and child.is_running()
    assert one(db, "select worker from jobs where id = :j", j=ok["id"]).endswith(
        f":{child.pid}")


def test_numpy_memory_error_is_recognised_and_the_limit_lifted():
    """Inside the limit numpy's own allocation fails with MemoryError (recognised as out of
    memory); after it the same process allocates the same array again."""
    code = textwrap.dedent("""
        import numpy as np
        from worker.lifecycle.memory import job_memory_limit, out_of_memory
        try:
            with job_memory_limit(64):
                np.ones(1 << 27)  # 1 GiB
        except Exception as exc:
            assert out_of_memory(exc), repr(exc)
            print("refused", type(exc).__name__)
        else:
            raise SystemExit("allocated past the limit")
        a = np.ones(1 << 27)
        print("allocated", a.nbytes)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused MemoryError" in out.stdout and f"allocated {1 << 30}" in out.stdout


def test_blas_under_a_tight_limit_after_the_warm_up():
    """``warm_blas`` (part of the pool child's preload) maps OpenBLAS's work buffers before
    any limit: a product inside a 16 MB limit then runs. Without it, the first product under
    that limit makes OpenBLAS exit the process ("Memory allocation still failed")."""
    code = textwrap.dedent("""
        import numpy as np
        from scipy.linalg import blas
        from worker.lifecycle.memory import job_memory_limit, warm_blas
        warm_blas()
        a = np.ones((512, 512))
        with job_memory_limit(16):
            b = a @ a
            c = blas.dgemm(1.0, a, a)
        print("ok", b[0, 0], c[0, 0])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok", "512.0", "512.0"], out
