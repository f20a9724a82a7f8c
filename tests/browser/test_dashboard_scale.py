"""The jobs list stays light with 5,000 jobs in the database: the browser asks for one page
(one ``GET /jobs?limit=20`` request, never the whole table) and shows exactly that page; the
next page follows the API's cursor. Timings are printed (``-s``), not asserted."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import insert

from tests.fixtures.browser import LAPTOP

pytestmark = pytest.mark.browser

N_JOBS = 5000
PAGE_SIZE = 20  # app/api/static/dashboard/pages/jobs.js PAGE_SIZE
STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def crowded_tenant(make_tenant) -> tuple[str, str, list[str]]:
    """A tenant with one dataset row and 5,000 finished jobs inserted directly; returns
    (tenant id, key, job ids newest first)."""
    from app.core.db import session_scope
    from app.core.orm import Dataset, Job

    tenant_id, key = make_tenant()
    ds_id = str(uuid.uuid4())
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(N_JOBS):
        created = t0 + timedelta(seconds=i)
        rows.append({
            "id": str(uuid.uuid4()), "tenant_id": tenant_id, "dataset_id": ds_id,
            "algorithm": "sodm", "backend": "local", "params": {"kernel": "rbf"},
            "request": {"dataset_id": ds_id, "algorithm": "sodm"}, "state": STATES[i % 3],
            "progress_fraction": 1.0 if i % 3 == 0 else 0.4, "progress_message": "",
            "history": [], "attempt": 1, "max_attempts": 3, "created_at": created,
            "started_at": created, "finished_at": created + timedelta(seconds=5 + i % 50),
            "updated_at": created,
        })
    with session_scope() as s:
        s.add(Dataset(id=ds_id, tenant_id=tenant_id, name="crowd", format="libsvm",
                      n_rows=10, n_features=2, classes={"-1": 5, "1": 5}, sparse=False,
                      storage_path=f"datasets/{ds_id}"))
        s.flush()
        s.execute(insert(Job), rows)
    return tenant_id, key, [r["id"] for r in reversed(rows)]


def test_jobs_page_with_5000_jobs(page_guard, api_server: str, crowded_tenant,
                                  screenshot) -> None:
    _, key, ids = crowded_tenant
    headers = {"Authorization": f"Bearer {key}"}
    times = []
    with httpx.Client(base_url=api_server, headers=headers) as c:
        for _ in range(5):
            t = time.perf_counter()
            r = c.get(f"/jobs?limit={PAGE_SIZE}")
            times.append(1000 * (time.perf_counter() - t))
            assert r.status_code == 200 and len(r.json()["items"]) == PAGE_SIZE
    api_ms = sorted(times)[2]  # median of 5

    page = page_guard.page
    page.set_viewport_size(LAPTOP)
    page.goto(f"{api_server}/dashboard")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    rows = page.locator("#jobs-table tbody tr")
    t = time.perf_counter()
    rows.first.wait_for()
    render_ms = 1000 * (time.perf_counter() - t)
    job_requests = page_guard.api_requests(r"^/jobs\?")  # up to the first render
    print(f"\nGET /jobs?limit={PAGE_SIZE} with {N_JOBS} jobs: median {api_ms:.0f} ms "
          f"(first {times[0]:.0f} ms); "
          f"sign-in to first row rendered: {render_ms:.0f} ms")

    assert rows.count() == PAGE_SIZE
    shown = page.locator("#jobs-table tbody tr").evaluate_all(
        "trs => trs.map(tr => tr.dataset.jobId)")
    assert shown == ids[:PAGE_SIZE]
    assert len(job_requests) == 2, job_requests  # the sign-in check (limit=1) and one page
    assert job_requests[1].endswith(f"/jobs?limit={PAGE_SIZE}")
    assert "crowd" in rows.first.inner_text()
    # later refreshes (polling) ask for the same single page, never more rows
    assert all(f"limit={PAGE_SIZE}" in u or "limit=1" in u
               for u in page_guard.api_requests(r"^/jobs\?"))
    screenshot(page, "jobs-5000")

    # the next page through the cursor: the following 20 jobs, again one request
    page.get_by_role("link", name="Older →").click()
    page.locator(f"tr[data-job-id='{ids[PAGE_SIZE]}']").wait_for()
    cursor_requests = [u for u in page_guard.api_requests(r"^/jobs\?") if "cursor=" in u]
    shown = page.locator("#jobs-table tbody tr").evaluate_all(
        "trs => trs.map(tr => tr.dataset.jobId)")
    assert shown == ids[PAGE_SIZE:2 * PAGE_SIZE]
    assert len(cursor_requests) == 1 and f"limit={PAGE_SIZE}" in cursor_requests[0]
    assert "Page 2" in page.locator(".pager").inner_text()

    # the state filter asks the API for one page of that state only
    page.select_option("#state-filter", "FAILED")
    page.wait_for_url("**/dashboard/jobs?state=FAILED")
    failed = [i for k, i in enumerate(reversed(ids)) if STATES[k % 3] == "FAILED"][::-1]
    page.locator(f"tr[data-job-id='{failed[0]}']").wait_for()
    assert rows.count() == PAGE_SIZE
    assert set(page.locator("#jobs-table .badge").all_inner_texts()) == {"FAILED"}
    assert any("state=FAILED" in u and f"limit={PAGE_SIZE}" in u
               for u in page_guard.api_requests(r"^/jobs\?"))
    screenshot(page, "jobs-5000-failed")
    page_guard.check()
