"""The model page shows the URLs other clients call: the Open Inference Protocol's infer
and metadata routes and MLflow's invocations route, for the version and for each alias
pointing at it; the URLs shown answer."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.test_dashboard import sign_in
from tests.service.jobs_helpers import submit, upload, wait_job

pytestmark = pytest.mark.browser


def test_model_page_shows_v2_and_mlflow_urls(page_guard, api_server: str, worker,
                                             make_tenant, datasets_dir) -> None:
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        ds = upload(c, datasets_dir, "heart_scale")
        job = wait_job(c, submit(c, {"dataset_id": ds["id"], "algorithm": "odm",
                                     "name": "heart-urls", "params": {"kernel": "linear"}})["id"])
        assert job["state"] == "SUCCEEDED", job["error"]
        c.put("/models/heart-urls/aliases/live", json={"version": 1}).raise_for_status()
    page = page_guard.page
    sign_in(page, api_server, key, f"/models/{job['model_id']}")
    page.get_by_role("heading", name="From other clients").wait_for()
    v2 = page.locator("#v2-infer-url").inner_text()
    assert v2 == f"POST {api_server}/v2/models/heart-urls/versions/1/infer"
    meta = page.locator("#v2-metadata-url").inner_text()
    mlflow = page.locator("#mlflow-url").inner_text()
    assert mlflow == f"POST {api_server}/models/heart-urls@1/invocations"
    assert f"{api_server}/v2/models/heart-urls@live/infer" in page.locator(
        "section", has_text="From other clients").inner_text()
    row = [0.1] * 13
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"}) as c:
        assert c.get(meta.removeprefix("GET ")).json()["inputs"][0]["shape"] == [-1, 13]
        r = c.post(v2.removeprefix("POST "), json={"inputs": [
            {"name": "X", "shape": [1, 13], "datatype": "FP64", "data": row}]})
        assert r.status_code == 200, r.text
        r = c.post(mlflow.removeprefix("POST "), json={"instances": [row]})
        assert r.status_code == 200 and len(r.json()["predictions"]) == 1, r.text
