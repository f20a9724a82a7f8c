"""The registry in the dashboard: on a model page point an alias at the version and remove
another, save tags and a description; the models list shows them and filters by tag and
alias."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.test_dashboard import sign_in, snap
from tests.service.jobs_helpers import submit, upload, wait_job

pytestmark = pytest.mark.browser


def test_aliases_tags_and_filters(page_guard, api_server: str, worker, make_tenant,
                                  datasets_dir, screenshot) -> None:
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        ds = upload(c, datasets_dir, "heart_scale")
        ids = []
        for _ in range(2):
            job = wait_job(c, submit(c, {"dataset_id": ds["id"], "algorithm": "odm",
                                         "name": "heart-reg",
                                         "params": {"kernel": "linear"}})["id"])
            assert job["state"] == "SUCCEEDED", job["error"]
            ids.append(job["model_id"])
        c.put("/models/heart-reg/aliases/old", json={"version": 2}).raise_for_status()
    page = page_guard.page
    sign_in(page, api_server, key, f"/models/{ids[0]}")
    page.get_by_role("heading", name="Registry").wait_for()
    page.locator("#aliases", has_text="heart-reg@old").wait_for()

    page.fill("#alias-name", "champion")
    page.get_by_role("button", name="Set alias").click()
    row = page.locator("#aliases tr", has_text="heart-reg@champion")
    row.wait_for()
    assert "this one" in row.inner_text()
    page.get_by_role("button", name="Remove alias old").click()
    page.locator("#aliases tr", has_text="heart-reg@old").wait_for(state="detached")

    page.fill("#model-description", "linear baseline for the registry test")
    page.fill("#model-tags", "prod, team=risk")
    page.get_by_role("button", name="Save", exact=True).click()
    page.locator("#toast", has_text="Saved tags").wait_for()
    snap(page, screenshot, "model-registry")

    page.get_by_role("link", name="Models", exact=True).click()
    page.locator("#model-filters").wait_for()
    page.fill("#filter-tag", "prod")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/dashboard/models?tag=prod")
    rows = page.locator("table tbody tr")
    rows.first.wait_for()
    assert rows.count() == 1
    text = rows.first.inner_text()
    assert "heart-reg v1" in text and "champion" in text and "team=risk" in text
    snap(page, screenshot, "models-filtered")
    page.fill("#filter-tag", "")
    page.fill("#filter-alias", "nobody")
    page.get_by_role("button", name="Filter").click()
    page.get_by_text("No model matches these filters").wait_for()
