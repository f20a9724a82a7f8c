"""The dashboard's operator pages in headless chromium against uvicorn + a celery worker:
sign-in kept across tabs only when asked, the header's worker status, jobs filtered by dataset
and model name, a dataset's models, two model versions compared side by side, a job re-run
with edited parameters, the grid-search form, and uploads of every accepted format."""

from __future__ import annotations

import gzip
import io
import lzma
import re
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from playwright.sync_api import expect
from sklearn.datasets import load_svmlight_file

from tests.browser.test_dashboard import dash, sign_in, snap
from tests.service.jobs_helpers import submit, wait_job

KEY_STORE = "sodm.apiKey"


@pytest.fixture(scope="module")
def ops(api_server: str, worker, make_tenant, datasets_dir: Path) -> dict[str, Any]:
    """A tenant with two datasets, two versions of model "cmp" on the first (lam 10 and
    1000) and one model "other" on the second."""
    _, key = make_tenant()
    text = lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        ds = [c.post("/datasets", files={"file": (f"{n}.libsvm", text)},
                     data={"name": n}).json() for n in ("heart-a", "heart-b")]
        jobs = [submit(c, {"dataset_id": ds[i]["id"], "algorithm": "odm", "name": name,
                           "params": {"kernel": "rbf", "lam": lam}, "seed": 1})
                for i, name, lam in ((0, "cmp", 10.0), (0, "cmp", 1000.0), (1, "other", 10.0))]
        done = [wait_job(c, j["id"], timeout=300) for j in jobs]
        assert all(j["state"] == "SUCCEEDED" for j in done), done
        models = [c.get(f"/models/{j['model_id']}").json() for j in done]
    return {"key": key, "datasets": ds, "jobs": done, "models": models}


def _api(api_server: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=api_server, timeout=60,
                        headers={"Authorization": f"Bearer {key}"})


def test_sign_in_survives_a_new_tab_only_when_kept(browser, api_server: str, make_tenant,
                                                   screenshot) -> None:
    _, key = make_tenant()
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, api_server, key)  # not kept: this tab only
        other = context.new_page()
        other.goto(dash(api_server))
        other.get_by_label("API key").wait_for()  # a new tab asks again
        other.close()

        page.get_by_role("button", name="Sign out").click()
        page.get_by_label("API key").fill(key)
        page.get_by_label("Keep me signed in on this browser").check()
        snap(page, screenshot, "signin-keep")
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("navigation", name="Main").wait_for()
        other = context.new_page()
        other.goto(dash(api_server, "/models"))
        other.get_by_role("heading", name="Models").wait_for()  # signed in in the new tab
        assert other.evaluate(f"localStorage.getItem('{KEY_STORE}')") == key
        other.get_by_role("button", name="Sign out").click()
        other.get_by_label("API key").wait_for()
        assert other.evaluate(f"localStorage.getItem('{KEY_STORE}')") is None
        third = context.new_page()
        third.goto(dash(api_server))
        third.get_by_label("API key").wait_for()  # signing out forgot it for every tab
    finally:
        context.close()


def test_header_shows_live_workers_and_queue(page_guard, api_server: str, ops) -> None:
    page = page_guard.page
    sign_in(page, api_server, ops["key"])
    status = page.locator("#workers")
    status.wait_for()
    expect(status).to_contain_text("live")
    text = status.inner_text()
    assert re.search(r"\d+ workers? live · \d+ queued", text), text


def test_jobs_filter_by_dataset_and_model_name(page_guard, api_server: str, ops,
                                               screenshot) -> None:
    page = page_guard.page
    sign_in(page, api_server, ops["key"])
    rows = page.locator("#jobs-table tbody tr")
    rows.first.wait_for()
    assert rows.count() == 3
    first_ds = ops["datasets"][0]
    page.locator(f"#dataset-filter option[value='{first_ds['id']}']").wait_for(state="attached")
    page.select_option("#dataset-filter", first_ds["id"])
    page.wait_for_url(re.compile(r"dataset_id="))
    expect(rows).to_have_count(2)
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.jobId)")) == {
        ops["jobs"][0]["id"], ops["jobs"][1]["id"]}
    page.select_option("#dataset-filter", "")
    page.wait_for_url(re.compile(r"/dashboard/jobs$"))
    page.fill("#name-filter", "other")
    page.press("#name-filter", "Enter")
    page.wait_for_url(re.compile(r"name=other"))
    expect(rows).to_have_count(1)
    assert rows.first.get_attribute("data-job-id") == ops["jobs"][2]["id"]
    snap(page, screenshot, "jobs-filtered")
    page.fill("#name-filter", "nothing-by-this-name")
    page.press("#name-filter", "Enter")
    page.locator("#jobs-table .empty-state", has_text="No jobs match").wait_for()


def test_a_datasets_page_lists_its_models(page_guard, api_server: str, ops,
                                          screenshot) -> None:
    page = page_guard.page
    ds = ops["datasets"][0]
    sign_in(page, api_server, ops["key"], f"/datasets/{ds['id']}")
    table = page.locator("#dataset-models table")
    table.wait_for()
    ids = table.locator("tbody tr").evaluate_all("rs => rs.map(r => r.dataset.modelId)")
    assert sorted(ids) == sorted(m["id"] for m in ops["models"][:2])
    assert "cmp v2" in table.inner_text() and "other" not in table.inner_text()
    snap(page, screenshot, "dataset-models")
    page.get_by_role("link", name="Jobs on this dataset →").click()
    page.wait_for_url(re.compile(rf"dataset_id={ds['id']}"))


def test_compare_two_versions_side_by_side(page_guard, api_server: str, ops,
                                           screenshot) -> None:
    page = page_guard.page
    v1, v2 = ops["models"][0], ops["models"][1]
    sign_in(page, api_server, ops["key"], f"/models/{v2['id']}")
    page.locator("#compare").click()
    page.get_by_role("heading", name="Compare two models").wait_for()
    assert page.locator("#cmp-a").input_value() == v2["id"]
    assert page.locator("#cmp-b").input_value() == v1["id"]  # the previous version
    page.get_by_role("button", name="Compare").click()
    page.wait_for_url(re.compile(r"/compare\?a=.+&b=.+"))
    metrics = page.locator("table.compare").first
    metrics.wait_for()
    acc = metrics.locator("tr[data-metric=Accuracy]").inner_text()
    for m in (v1, v2):  # as the page formats them (4 significant digits)
        a = m["metrics"]["accuracy"]
        assert (str(int(a)) if a == int(a) else format(a, ".4g")) in acc, (acc, a)
    assert page.locator("[data-chart=margin-a] svg.margin-histogram").count() == 1
    assert page.locator("[data-chart=margin-b] svg.margin-histogram").count() == 1
    lam = page.locator("tr[data-param=lam]")
    assert "differs" in lam.inner_text() and "1000" in lam.inner_text()
    assert "differs" not in page.locator("tr[data-param=kernel]").inner_text()
    snap(page, screenshot, "compare")


def test_rerun_a_job_with_edited_parameters(page_guard, api_server: str, ops,
                                            screenshot) -> None:
    page = page_guard.page
    src = ops["jobs"][0]
    sign_in(page, api_server, ops["key"], f"/jobs/{src['id']}")
    page.locator("#rerun").click()
    page.get_by_role("heading", name=re.compile("Re-run job")).wait_for()
    assert page.locator("#tr-dataset").input_value() == src["dataset_id"]
    assert page.locator("#tr-algorithm").input_value() == "odm"
    assert page.locator("#tr-kernel").input_value() == "rbf"
    assert float(page.locator("#p-lam").input_value()) == 10.0
    assert page.locator("#tr-name").input_value() == "cmp"
    assert page.locator("#tr-seed").input_value() == "1"
    page.fill("#p-lam", "250")
    snap(page, screenshot, "rerun")
    page.get_by_role("button", name="Start training").click()
    page.wait_for_url(re.compile(r"/dashboard/jobs/[0-9a-f-]{36}$"))
    new_id = page.url.rsplit("/", 1)[1]
    assert new_id != src["id"]
    with _api(api_server, ops["key"]) as c:
        job = c.get(f"/jobs/{new_id}").json()
        assert job["params"]["lam"] == 250 and job["params"]["kernel"] == "rbf"
        assert job["dataset_id"] == src["dataset_id"] and job["name"] == "cmp"
        assert job["request"]["seed"] == 1
        if job["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            c.post(f"/jobs/{new_id}/cancel")


def test_grid_search_form(page_guard, api_server: str, ops, screenshot) -> None:
    page = page_guard.page
    ds = ops["datasets"][1]
    sign_in(page, api_server, ops["key"], f"/train?dataset={ds['id']}")
    page.get_by_role("heading", name="Train a model").wait_for()
    page.select_option("#tr-algorithm", "odm")
    assert page.locator("#grid-lam").is_hidden()
    page.get_by_label("Search a grid of values by cross-validation").check()
    page.fill("#grid-lam", "abc")  # refused by the API, shown next to the field
    page_guard.expect(422, "/train")
    page.get_by_role("button", name="Start training").click()
    err = page.locator("#grid-lam-error")
    err.wait_for()
    assert page.locator("#grid-lam").get_attribute("aria-invalid") == "true"
    page.fill("#grid-lam", "10, 100")
    page.fill("#grid-gamma", "0.1, scale")
    page.fill("#grid-folds", "2")
    snap(page, screenshot, "grid-search")
    page.get_by_role("button", name="Start training").click()
    page.wait_for_url(re.compile(r"/dashboard/jobs/[0-9a-f-]{36}$"))
    new_id = page.url.rsplit("/", 1)[1]
    with _api(api_server, ops["key"]) as c:
        search = c.get(f"/jobs/{new_id}").json()["request"]["search"]
        assert search == {"grid": {"lam": [10, 100], "gamma": [0.1, "scale"]}, "folds": 2}
        c.post(f"/jobs/{new_id}/cancel")


def _upload(page, name: str, data: bytes, fmt: str = "") -> str:
    page.set_input_files("#ds-file", files=[{"name": name, "mimeType": "application/octet-stream",
                                            "buffer": data}])
    if fmt:
        page.select_option("#ds-format", fmt)
    page.get_by_role("button", name="Upload").click()
    result = page.locator("#upload-result .success, #upload-result .problem")
    result.wait_for()
    text = result.inner_text()
    page.locator("#ds-file").evaluate("el => { el.value = ''; }")
    page.evaluate("document.getElementById('upload-result').replaceChildren()")
    return text


def test_upload_field_takes_every_format_the_api_takes(page_guard, api_server: str, ops,
                                                       datasets_dir: Path, screenshot) -> None:
    page = page_guard.page
    sign_in(page, api_server, ops["key"], "/datasets")
    page.get_by_role("heading", name="Upload a dataset").wait_for()
    assert page.locator("#ds-file").get_attribute("accept") is None  # no file is filtered out
    text = lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())
    X, y = load_svmlight_file(io.BytesIO(text), zero_based=False)
    csv = "label," + ",".join(f"x{j}" for j in range(13)) + "\n" + "\n".join(
        f"{int(lab)}," + ",".join(repr(float(v)) for v in row)
        for lab, row in zip(y, X.toarray(), strict=True)) + "\n"
    buf = io.BytesIO()
    pq.write_table(pa.table({"label": y.astype(int), **{f"x{j}": X.toarray()[:, j]
                                                       for j in range(13)}}), buf)
    cases = [("heart_scale", text, "libsvm"),  # LIBSVM's own name, no extension
             ("heart.svmlight", text, ""), ("heart.csv.gz", gzip.compress(csv.encode()), ""),
             ("heart.libsvm.xz", lzma.compress(text), ""), ("heart.pq", buf.getvalue(), "")]
    for name, data, fmt in cases:
        out = _upload(page, name, data, fmt)
        assert "Uploaded" in out and "270 rows" in out, (name, out)
        if fmt:
            page.select_option("#ds-format", "")
    snap(page, screenshot, "upload-formats")
