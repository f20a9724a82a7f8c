"""The dashboard's view of how a model was fitted, in a real browser against the real stack:
the automatic hyperparameter search (chosen values, CPU seconds, the CV table) on the job and
model pages, the probabilities' calibration, probabilities in the prediction box and the
ONNX download."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from tests.browser.test_dashboard import sign_in, snap
from tests.service.jobs_helpers import load_libsvm, submit, upload, wait_job

pytestmark = pytest.mark.browser


def test_auto_search_calibration_and_onnx(page_guard, api_server: str, worker, make_tenant,
                                          datasets_dir: Path, screenshot) -> None:
    page = page_guard.page
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        heart = upload(c, datasets_dir, "heart_scale")
        job = submit(c, {"dataset_id": heart["id"], "test_fraction": 0.2, "seed": 4,
                         "name": "heart-auto", "params": {"probability": True}})
        done = wait_job(c, job["id"])
        assert done["state"] == "SUCCEEDED", done["error"]
        model = c.get(f"/models/{done['model_id']}").json()
    auto = model["fit_info"]["auto"]

    # the job page announces the search and shows its result from the model
    sign_in(page, api_server, key, f"/jobs/{job['id']}")
    section = page.locator("section.card", has=page.get_by_role(
        "heading", name="Automatic hyperparameters"))
    section.locator("#auto-chosen").wait_for()
    assert "lam, gamma, theta chosen by cross-validation" in section.inner_text()
    snap(page, screenshot, "job-auto")

    # the model page: chosen values, CPU seconds within the budget, the CV table
    page.goto(f"{api_server}/dashboard/models/{model['id']}")
    chosen = page.locator("#auto-chosen")
    chosen.wait_for()
    text = chosen.inner_text()
    assert text.count("(auto)") == 3
    assert page.locator("#auto-cpu").get_attribute("data-within-budget") == "true"
    assert (f"the budget reaches {auto['row_bound']:,} rows at most"
            in page.locator("#auto-rows").inner_text())
    rows = page.locator("#auto-table tbody tr")
    assert rows.count() == min(12, len(auto["cv_table"]))
    assert page.locator("#auto-table tbody tr.chosen").count() == 1
    ece = float(page.locator("#cal-ece").inner_text())
    assert ece == pytest.approx(model["metrics"]["calibration"]["ece"], abs=1e-4)
    snap(page, screenshot, "model-auto")

    # probabilities in the prediction box
    page.fill("#predict-rows", "\n".join("0.1 " * 12 + "0.2" for _ in range(2)))
    page.get_by_role("button", name="Predict").click()
    page.locator("#predict-output tbody tr").first.wait_for()
    assert "probabilities" in page.locator("#predict-output thead").inner_text().lower()

    # the ONNX download runs in onnxruntime and gives the model's decision values
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download ONNX").click()
    assert dl.value.suggested_filename == "heart-auto-v1.onnx"
    sess = ort.InferenceSession(Path(dl.value.path()).read_bytes(),
                                providers=["CPUExecutionProvider"])
    X, _ = load_libsvm(datasets_dir, "heart_scale", n_features=13)
    label, dec, proba = sess.run(None, {"X": X[:10]})
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        ref = c.post("/predict", json={"model_id": model["id"],
                                       "instances": X[:10].tolist()}).json()
    np.testing.assert_allclose(dec, ref["decision_values"], atol=1e-5)
    np.testing.assert_allclose(proba, ref["probabilities"], atol=1e-5)
    assert label.tolist() == ref["labels"]
    page_guard.check()
