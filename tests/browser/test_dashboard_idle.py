"""The dashboard's background requests stay constant however long a tab is used: each page
stops what it started when it is left, and the header's worker status is polled by one
watcher per tab. Every navigation used to start one more worker-status poller (a tab
clicked 60 times through its pages and then left idle sent 378 requests in 30 s)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.test_dashboard import sign_in
from tests.service.jobs_helpers import submit, upload_as, wait_job

IDLE_SECONDS = 8.0  # the 5 s polls plus a slow answer: every poller is seen at least once
ROUNDS = 3  # 10 in-app navigations each


@pytest.fixture(scope="module")
def tour(api_server: str, worker, make_tenant, datasets_dir: Path) -> dict[str, Any]:
    """A tenant with a dataset, a finished job and its model: every page has content."""
    tenant = make_tenant()
    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        job = wait_job(c, submit(c, {"dataset_id": ds["id"], "algorithm": "odm",
                                     "params": {"kernel": "linear", "lam": 10.0}})["id"])
    assert job["state"] == "SUCCEEDED", job
    return {"key": tenant[1], "dataset": ds, "job": job}


def _api_requests(guard) -> int:
    """Requests to the JSON API so far (the dashboard's assets are not counted)."""
    return sum(1 for _, url in guard.requests if "/dashboard" not in url)


def _idle_requests(guard) -> int:
    page = guard.page
    page.wait_for_timeout(2000)  # the page's first answers are in
    before = _api_requests(guard)
    time.sleep(IDLE_SECONDS)
    page.wait_for_timeout(1)  # let the page's event loop deliver what it sent
    return _api_requests(guard) - before


def test_idle_requests_stay_at_one_page_after_many_navigations(page_guard, api_server: str,
                                                               tour) -> None:
    page = page_guard.page
    sign_in(page, api_server, tour["key"], "/jobs")
    page.locator("#jobs-table tbody tr").first.wait_for()
    one_page = _idle_requests(page_guard)
    assert one_page >= 2, one_page  # the jobs list and the worker status both poll

    job, ds, model = tour["job"]["id"], tour["dataset"]["id"], tour["job"]["model_id"]

    def go(href: str, heading: str | None = None) -> None:
        page.locator(f"a[data-link][href$='/dashboard{href}']").first.click()
        page.wait_for_url(f"**/dashboard{href}")
        h1 = page.locator("#main h1")
        h1.first.wait_for()
        if heading is not None:
            assert heading in h1.first.inner_text()

    for _ in range(ROUNDS):  # every page, through the links a user clicks
        go("/jobs", "Jobs")
        go(f"/jobs/{job}", "Job")
        go("/models", "Models")
        go("/compare", "Compare")
        go("/models", "Models")
        go(f"/models/{model}")
        go("/datasets", "Datasets")
        go(f"/datasets/{ds}")
        go("/predictions", "predictions")
        go("/train", "Train")
    go("/jobs", "Jobs")
    page.locator("#jobs-table tbody tr").first.wait_for()
    after = _idle_requests(page_guard)
    # the same page idle, the same pollers: /jobs and /workers every 5 s, the dataset names
    # every 30 s, so 2 to 5 requests in 8 s whatever their phases (30 pollers: ~50)
    assert after <= one_page + 3 and after <= 10, (one_page, after)
    assert len(page_guard.api_requests(r"^/workers$")) < 3 * ROUNDS * 10, \
        "more worker-status requests than navigations: a poller per page"
