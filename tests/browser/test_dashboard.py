"""The dashboard in a real browser (Debian chromium, headless) against uvicorn + a celery
worker on 127.0.0.1: sign in, upload, train and watch the job finish live, the model page
with its margin histogram, predictions and download, cancelling a running job, and phone
width. Any console error or failed request fails the test (``page_guard``); every page is
saved under ``test-output/screenshots/``."""

from __future__ import annotations

import lzma
import re
from pathlib import Path

import httpx
import pytest

from tests.fixtures.browser import PHONE, open_guarded
from tests.service.jobs_helpers import LONG_ODM, submit, upload, wait_job

pytestmark = pytest.mark.browser


def dash(api_server: str, path: str = "") -> str:
    return f"{api_server}/dashboard{path}"


def assert_clean(page) -> None:
    """No leaked placeholders in the visible text (outside code samples)."""
    text = page.evaluate("""() => { const b = document.body.cloneNode(true);
        b.querySelectorAll('code, script, noscript').forEach(e => e.remove());
        return b.textContent; }""")
    bad = re.findall(r"\b(?:undefined|null|NaN)\b|\[object \w+\]", text)
    assert not bad, (page.url, bad)


# WCAG 2 contrast check run in the page (returns texts below AA)
CONTRAST_JS = (Path(__file__).parent / "contrast.js").read_text()


def snap(page, screenshot, name: str) -> None:
    """Check the page's text (no placeholders, WCAG AA contrast), then save a screenshot."""
    assert_clean(page)
    low = page.evaluate(CONTRAST_JS)
    assert not low, (page.url, low[:10])
    screenshot(page, name)


def sign_in(page, api_server: str, key: str, path: str = "") -> None:
    page.goto(dash(api_server, path))
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Main").wait_for()


@pytest.fixture(scope="module")
def heart_bytes(datasets_dir: Path) -> bytes:
    with lzma.open(datasets_dir / "heart_scale.xz") as fh:
        return fh.read()


def test_sign_in_refuses_a_wrong_key(page_guard, api_server: str, screenshot) -> None:
    page = page_guard.page
    page_guard.expect(401, "/jobs?limit=1")
    page.goto(dash(api_server))
    assert page.get_by_role("navigation", name="Main").is_hidden()
    page.get_by_label("API key").fill("not-a-key")
    page.get_by_role("button", name="Sign in").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "not accepted" in alert.inner_text()
    assert page.evaluate("sessionStorage.getItem('sodm.apiKey')") is None
    snap(page, screenshot, "signin-refused")
    page_guard.check()


def test_upload_train_watch_and_model(page_guard, api_server: str, worker, make_tenant,
                                      heart_bytes: bytes, screenshot) -> None:
    """The main flow, all through the UI, with one page load after sign-in."""
    page = page_guard.page
    _, key = make_tenant()
    page.goto(dash(api_server))
    snap(page, screenshot, "signin")
    sign_in(page, api_server, key)
    page.evaluate("window.__sameDocument = true")  # gone if the page ever reloads
    page.locator("#jobs-table .empty-state").wait_for()
    assert "No jobs yet" in page.locator("#jobs-table").inner_text()

    # datasets: a malformed file shows the API's validation problem inline
    page.get_by_role("link", name="Datasets", exact=True).click()
    page.get_by_role("heading", name="Upload a dataset").wait_for()
    page_guard.expect(422, "/datasets")
    page.set_input_files("#ds-file", files=[{"name": "bad.libsvm", "mimeType": "text/plain",
                                            "buffer": b"+1 1:0.5 2:0.1\n-1 3:abc\n"}])
    page.get_by_role("button", name="Upload").click()
    problem = page.locator("#upload-result .problem")
    problem.wait_for()
    assert "422" in problem.inner_text()
    assert re.search(r"line\D*2", problem.inner_text(), re.I), problem.inner_text()
    snap(page, screenshot, "datasets-upload-problem")

    # a real upload, with progress, then the summary page
    page.set_input_files("#ds-file", files=[{"name": "heart_scale.libsvm",
                                            "mimeType": "text/plain", "buffer": heart_bytes}])
    page.fill("#ds-name", "heart")
    page.get_by_role("button", name="Upload").click()
    page.locator("#upload-result .success").wait_for()
    assert page.locator(".upload .progress").get_attribute("data-pct") == "100"
    row = page.locator("#datasets-table tbody tr", has_text="heart")
    assert "270" in row.inner_text()
    snap(page, screenshot, "datasets")
    row.get_by_role("link", name="heart").click()
    page.get_by_role("heading", name="Class balance").wait_for()
    assert page.locator(".class-bars li").count() == 2
    summary = page.locator("dl.kv").first.inner_text()
    assert "270" in summary and "13" in summary
    snap(page, screenshot, "dataset-summary")

    # train: SODM rbf, 25 % held out; submitting opens the job's live page
    page.get_by_role("link", name="Train on this dataset").click()
    page.get_by_role("heading", name="Train a model").wait_for()
    assert page.locator("#tr-dataset option:checked").inner_text().startswith("heart")
    assert page.locator("#p-lam").input_value() == "auto"  # chosen by cross-validation
    assert "Default auto" in page.locator("[data-param=theta]").inner_text()
    page.select_option("#tr-algorithm", "sodm")
    page.select_option("#tr-kernel", "rbf")
    page.fill("#tr-fraction", "0.25")
    page.fill("#tr-name", "heart-sodm")
    snap(page, screenshot, "train")
    page.get_by_role("button", name="Start training").click()
    page.wait_for_url(re.compile(r"/dashboard/jobs/[0-9a-f-]{36}$"))
    job_id = page.url.rsplit("/", 1)[1]

    # live: the bar reaches 100 % and the state SUCCEEDED, without reloading
    bar = page.locator(".live-status .progress")
    bar.wait_for()
    bar.evaluate("""el => { window.__pcts = [el.dataset.pct];
        new MutationObserver(() => window.__pcts.push(el.dataset.pct))
          .observe(el, { attributes: true, attributeFilter: ['data-pct'] }); }""")
    bar.and_(page.locator("[data-pct='100']")).wait_for(timeout=120_000)
    page.locator(".badge[data-state=SUCCEEDED]").wait_for(timeout=30_000)
    assert page.evaluate("window.__sameDocument") is True
    seen = [int(p) for p in page.evaluate("window.__pcts")]
    assert seen[0] < 100 and seen[-1] == 100, seen  # it moved on this page, by itself
    assert page.locator(".live-status [role=progressbar]").get_attribute("aria-valuenow") == "100"
    assert page.get_by_role("button", name="Cancel job").is_hidden()
    # the final history arrives with the job re-read that follows the last event (debounced)
    objective = page.locator("[data-chart=objective] svg:not([data-points='0'])")
    objective.wait_for(timeout=10_000)
    assert int(objective.get_attribute("data-points")) >= 1
    assert page.locator("[data-chart=objective] svg path.line").count() == 1
    snap(page, screenshot, "job-succeeded")

    # the jobs list shows it finished, with its dataset's name
    page.get_by_role("link", name="Jobs", exact=True).click()
    row = page.locator(f"tr[data-job-id='{job_id}']")
    row.wait_for()
    assert "SUCCEEDED" in row.inner_text() and "heart" in row.inner_text()
    assert row.locator(".progress").get_attribute("data-pct") == "100"
    snap(page, screenshot, "jobs")

    # the model: metrics, confusion matrix, margin histogram with the theta band
    page.get_by_role("link", name="Models", exact=True).click()
    link = page.get_by_role("link", name="heart-sodm v1")
    link.wait_for()
    snap(page, screenshot, "models")
    link.click()
    page.get_by_role("heading", name="Margin distribution").wait_for()
    hist = page.locator("svg.margin-histogram")
    assert int(hist.get_attribute("data-bins")) >= 5
    assert hist.locator("rect.hist-bar").count() == int(hist.get_attribute("data-bins"))
    assert hist.locator("rect.band").count() == 1
    assert hist.locator("text.band-label").all_text_contents() == ["1−θ", "1+θ"]
    model = httpx.get(f"{api_server}/models?limit=1",
                      headers={"Authorization": f"Bearer {key}"}).json()["items"][0]
    mean, var = model["margin"]["mean"], model["margin"]["variance"]
    assert float(page.locator("#margin-mean").inner_text()) == pytest.approx(mean, rel=1e-3)
    assert float(page.locator("#margin-variance").inner_text()) == pytest.approx(var, rel=1e-3)
    acc = page.locator("[data-metric=Accuracy] .metric-value").inner_text()
    assert float(acc) == pytest.approx(model["metrics"]["accuracy"], abs=1e-4)
    roc = page.locator("[data-chart=roc] svg path.line")
    assert roc.count() == 1
    assert roc.get_attribute("d").count("L") == len(model["metrics"]["roc_curve"]["fpr"]) - 1
    cm = model["metrics"]["confusion_matrix"]["matrix"]
    assert page.locator("table.confusion tbody td").count() == sum(len(r) for r in cm)
    snap(page, screenshot, "model")

    # predictions for pasted LIBSVM rows (a leading label is ignored)
    first_rows = heart_bytes.decode().splitlines()[:3]
    page.fill("#predict-rows", "\n".join(first_rows))
    page.get_by_role("button", name="Predict").click()
    out = page.locator("#predict-output tbody tr")
    out.first.wait_for()
    assert out.count() == 3
    labels = [t.strip() for t in page.locator("#predict-output tbody td:nth-child(2)")
              .all_inner_texts()]
    assert set(labels) <= {"-1", "1"}
    snap(page, screenshot, "model-predict")

    # the model file downloads with the key
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download model file").click()
    saved = dl.value.path()
    assert dl.value.suggested_filename == "heart-sodm-v1.sodm"
    assert Path(saved).read_bytes()[:2] == b"PK"  # the zip of header.json + .npy arrays

    # the same pages at phone width: no sideways scrolling, tables become cards
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    snap(page, screenshot, "phone-model")
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.locator(f"tr[data-job-id='{job_id}']").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert page.locator("table.jobs thead").is_hidden()
    snap(page, screenshot, "phone-jobs")

    assert page.evaluate("window.__sameDocument") is True
    page_guard.check()


def test_cancel_a_running_job_and_live_list(page_guard, api_server: str, worker, make_tenant,
                                            datasets_dir: Path, screenshot) -> None:
    """The list follows a running job, the job page cancels it, and a job submitted elsewhere
    appears in the list and finishes there, all without reloading."""
    page = page_guard.page
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        guide = upload(c, datasets_dir, "svmguide1")  # long enough to cancel
        job = submit(c, {"dataset_id": guide["id"], "algorithm": "odm", "params": LONG_ODM,
                         "test_fraction": 0.2})
        sign_in(page, api_server, key)
        page.evaluate("window.__sameDocument = true")
        row = page.locator(f"tr[data-job-id='{job['id']}']")
        row.locator(".badge[data-state=RUNNING]").wait_for(timeout=60_000)
        assert "svmguide1" in row.inner_text()
        snap(page, screenshot, "jobs-running")

        row.get_by_role("link", name="svmguide1-odm").click()
        page.locator(".badge[data-state=RUNNING]").wait_for()
        snap(page, screenshot, "job-running")
        page.get_by_role("button", name="Cancel job").click()
        page.locator(".badge[data-state=CANCELLED]").wait_for(timeout=30_000)
        assert page.get_by_role("button", name="Cancel job").is_hidden()
        assert "cancel" in page.locator(".progress-message").inner_text().lower()
        snap(page, screenshot, "job-cancelled")
        assert wait_job(c, job["id"], timeout=5)["state"] == "CANCELLED"

        page.get_by_role("link", name="Jobs", exact=True).click()
        row.locator(".badge[data-state=CANCELLED]").wait_for()
        heart = upload(c, datasets_dir, "heart_scale")
        quick = submit(c, {"dataset_id": heart["id"], "algorithm": "sodm",
                           "params": {"kernel": "rbf"}, "test_fraction": 0.2})
        new_row = page.locator(f"tr[data-job-id='{quick['id']}']")
        new_row.locator(".badge[data-state=SUCCEEDED]").wait_for(timeout=120_000)
        assert new_row.locator(".progress").get_attribute("data-pct") == "100"
        rows = page.locator("#jobs-table tbody tr").evaluate_all(
            "trs => trs.map(tr => tr.dataset.jobId)")
        assert rows == [quick["id"], job["id"]]  # newest first
        assert page.evaluate("window.__sameDocument") is True
    page_guard.check()


def test_phone_width_and_keyboard(browser, api_server: str, make_tenant, screenshot) -> None:
    """At 390 px the tables turn into cards; every nav link is reachable with Tab."""
    guard = open_guarded(browser, PHONE)
    page = guard.page
    try:
        _, key = make_tenant()
        page.goto(dash(api_server))
        assert page.evaluate("document.activeElement.id") == "api-key"  # focused to type
        page.keyboard.type(key)
        page.keyboard.press("Enter")
        page.get_by_role("navigation", name="Main").wait_for()
        page.locator("#jobs-table .empty-state").wait_for()
        guard.reload()  # signed in for this tab; focus starts at the top of the document
        page.locator("#jobs-table .empty-state").wait_for()
        order = []
        for _ in range(7):
            page.keyboard.press("Tab")
            order.append(page.evaluate("document.activeElement.textContent.trim()"))
        assert order == ["Skip to content", "SODM", "Jobs", "Models", "Datasets", "Predictions",
                         "Train"], order
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"horizontal scroll at phone width: {width}px"
        snap(page, screenshot, "phone-jobs-empty")
        page.get_by_role("link", name="Train", exact=True).click()
        page.get_by_role("heading", name="Train a model").wait_for()
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        snap(page, screenshot, "phone-train")
        guard.check()
    finally:
        page.context.close()
