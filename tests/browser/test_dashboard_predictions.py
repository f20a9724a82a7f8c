"""Batch predictions in the dashboard: start one from a model page, watch it finish on the
predictions page and download the result as Parquet and as CSV; the job's own page shows its
model, dataset, rows done and the downloads."""

from __future__ import annotations

import httpx
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.browser.test_dashboard import sign_in, snap
from tests.service.jobs_helpers import submit, upload, wait_job

pytestmark = pytest.mark.browser


def test_batch_prediction_from_the_model_page(page_guard, api_server: str, worker, make_tenant,
                                              datasets_dir, screenshot) -> None:
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        ds = upload(c, datasets_dir, "heart_scale")
        job = wait_job(c, submit(c, {"dataset_id": ds["id"], "algorithm": "odm",
                                     "name": "heart-batch",
                                     "params": {"kernel": "linear"}})["id"])
        assert job["state"] == "SUCCEEDED", job["error"]
    page = page_guard.page
    sign_in(page, api_server, key, f"/models/{job['model_id']}")
    page.get_by_role("heading", name="Batch prediction").wait_for()
    page.locator("#batch-dataset option", has_text="heart_scale").wait_for(state="attached")
    page.select_option("#batch-dataset", ds["id"])
    page.get_by_role("button", name="Run over the dataset").click()
    page.wait_for_url("**/dashboard/predictions")
    row = page.locator("#predictions-table tr[data-state=SUCCEEDED]")
    row.wait_for(timeout=120_000)
    text = row.inner_text()
    assert "heart-batch v1" in text and "270" in text
    snap(page, screenshot, "predictions")
    with page.expect_download() as info:
        row.get_by_role("button", name="as Parquet").click()
    table = pq.read_table(info.value.path())
    assert table.num_rows == 270 and "decision_value" in table.column_names
    with page.expect_download() as info:
        row.get_by_role("button", name="as CSV").click()
    assert info.value.suggested_filename.endswith(".csv")
    as_csv = pacsv.read_csv(info.value.path())
    assert as_csv.num_rows == 270
    assert as_csv.column("predicted_label").to_pylist() == \
        table.column("predicted_label").to_pylist()

    # the job's page (/jobs/{id} of a prediction job): model, dataset, rows, downloads
    row.get_by_role("link", name=row.get_attribute("data-job-id")[:8]).click()
    page.locator("#prediction-rows", has_text="270 of 270 rows").wait_for()
    details = page.locator("section.card", has=page.get_by_role("heading", name="Details"))
    assert "heart-batch v1" in details.inner_text() and "heart_scale" in details.inner_text()
    assert page.locator("#cancel").is_hidden()
    with page.expect_download() as info:
        page.locator("#prediction-downloads").get_by_role("button", name="as Parquet").click()
    assert pq.read_table(info.value.path()).equals(table)
    snap(page, screenshot, "prediction-job")
