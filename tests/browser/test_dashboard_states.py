"""Dashboard views of states a quick run rarely shows: a failed job with its problem and a
multi-level convergence history (rows written straight into the database), and the train
form's inline errors for a request the API refuses (422)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.browser.test_dashboard import sign_in, snap
from tests.service.jobs_helpers import upload

pytestmark = pytest.mark.browser

HISTORY = [
    {"level": lvl, "partitions": 2 ** (3 - lvl), "objective": obj, "kkt_violation": kkt,
     "val_accuracy": acc, "n_sv": 100 + 10 * lvl, "seconds": 0.5, "elapsed": 0.5 * (lvl + 1)}
    for lvl, (obj, kkt, acc) in enumerate([(-80.0, 0.9, 0.71), (-95.5, 0.12, 0.78),
                                           (-101.2, 0.011, 0.81), (-103.9, 0.0009, 0.83)])
]
ERROR = {"type": "https://sodm.dev/problems/training-failed", "title": "Training failed",
         "status": 500, "detail": "MemoryError: kernel block of 40000 x 40000 does not fit"}


def test_failed_job_shows_error_and_history(page_guard, api_server: str, make_tenant,
                                            screenshot) -> None:
    from app.core.db import session_scope
    from app.core.orm import Dataset, Job

    tenant_id, key = make_tenant()
    ds_id, job_id = str(uuid.uuid4()), str(uuid.uuid4())
    t0 = datetime.now(UTC) - timedelta(minutes=3)
    with session_scope() as s:
        s.add(Dataset(id=ds_id, tenant_id=tenant_id, name="big", format="libsvm", n_rows=40000,
                      n_features=8, classes={"-1": 20000, "1": 20000}, sparse=False,
                      storage_path=f"datasets/{ds_id}"))
        s.flush()
        s.add(Job(id=job_id, tenant_id=tenant_id, dataset_id=ds_id, algorithm="sodm",
                  backend="local", params={"kernel": "rbf", "levels": 3},
                  request={"dataset_id": ds_id, "test_fraction": 0.2, "seed": 7},
                  model_name="big-sodm", state="FAILED", progress_fraction=0.8,
                  progress_message="level 3 of 3", history=HISTORY, error=ERROR, attempt=3,
                  max_attempts=3, created_at=t0, started_at=t0 + timedelta(seconds=2),
                  finished_at=t0 + timedelta(seconds=95)))

    page = page_guard.page
    sign_in(page, api_server, key, f"/jobs/{job_id}")
    page.locator(".badge[data-state=FAILED]").wait_for()
    alert = page.get_by_role("alert")
    assert "Training failed (500)" in alert.inner_text()
    assert ERROR["detail"] in alert.inner_text()
    assert page.get_by_role("button", name="Cancel job").is_hidden()
    assert page.locator(".live-status .progress").get_attribute("data-pct") == "80"
    assert page.locator(".live-status").inner_text().count("1m 33s") == 1  # elapsed
    for chart in ("objective", "kkt", "val"):
        svg = page.locator(f"[data-chart={chart}] svg")
        assert svg.get_attribute("data-points") == "4", chart
        assert svg.locator("circle").count() == 4
    # the KKT violation spans three decades: a log axis
    assert "(log)" in page.locator("[data-chart=kkt] svg").text_content()
    snap(page, screenshot, "job-failed")


def _refusal_at(page, field: str) -> str:
    """Submit the train form and return the refusal shown at ``field`` (its error line)."""
    page.get_by_role("button", name="Start training").click()
    err = page.locator(f"{field}-error")
    err.wait_for()
    return err.inner_text()


def test_train_form_shows_refusal_inline(page_guard, api_server: str, make_tenant,
                                         datasets_dir: Path, screenshot) -> None:
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        guide = upload(c, datasets_dir, "svmguide1")  # 4 features
        heart = upload(c, datasets_dir, "heart_scale")  # 13 features
    page = page_guard.page
    page_guard.expect(422, "/train")
    sign_in(page, api_server, key, f"/train?dataset={guide['id']}")
    page.get_by_role("heading", name="Train a model").wait_for()
    assert page.locator("#tr-dataset").input_value() == guide["id"]  # from ?dataset=
    page.select_option("#tr-split", "dataset")
    assert page.locator("#tr-fraction").is_hidden()
    page.select_option("#tr-testds", heart["id"])
    page.select_option("#tr-kernel", "poly")
    assert page.locator("#p-degree").is_visible()  # poly parameters appear
    page.get_by_role("button", name="Start training").click()
    err = page.locator("#tr-testds-error")
    err.wait_for()
    assert "feature" in err.inner_text()
    assert page.locator("#tr-testds").get_attribute("aria-invalid") == "true"
    assert page.url.endswith(f"/train?dataset={guide['id']}")  # still on the form
    snap(page, screenshot, "train-refused")

    # a bad parameter value is named by the API and shown at its field
    page.select_option("#tr-split", "fraction")
    page.fill("#p-theta", "1.5")
    assert "theta" in _refusal_at(page, "#p-theta")

    # each algorithm shows its own parameters and defaults; typed values survive a switch
    page.select_option("#tr-algorithm", "dc")
    assert page.locator("#p-levels").input_value() == "2"
    assert page.locator("#p-fanout").is_visible() and page.locator("#p-p").is_hidden()
    assert page.locator("#p-theta").input_value() == "1.5"
    page.select_option("#tr-algorithm", "svrg")
    assert page.locator("#tr-kernel").input_value() == "linear"
    assert page.locator("#tr-kernel option[value=rbf]").is_disabled()
    assert float(page.locator("#p-tol").input_value()) == 1e-6
    assert page.locator("#p-levels").is_hidden() and page.locator("#p-epochs").is_visible()

    # weights: per-label class weights are sent as {label: weight}, a label the data lacks
    # is named at that field; a weight column of a LIBSVM dataset is refused at its own
    page.select_option("#tr-algorithm", "odm")
    page.fill("#p-theta", "")
    assert page.locator("#tr-cw-labels").is_hidden()
    page.select_option("#tr-cw", "labels")
    hint = page.locator("[data-field=class_weight_labels]").inner_text()
    assert "Labels of this dataset" in hint and "rows)" in hint, hint
    page.fill("#tr-cw-labels", "7: 2")
    assert "'7'" in _refusal_at(page, "#tr-cw-labels")
    page.select_option("#tr-cw", "")
    page.fill("#tr-weight", "w")
    assert "CSV or Parquet" in _refusal_at(page, "#tr-weight")
    assert page.locator("#tr-cw-labels-error").is_hidden()
    page_guard.check()


def test_another_tenants_job_is_not_shown(page_guard, api_server: str, make_tenant) -> None:
    """The dashboard shows only what the key's tenant owns: another tenant's job is a 404."""
    from app.core.db import session_scope
    from app.core.orm import Dataset, Job

    owner_id, _ = make_tenant()
    _, key = make_tenant()
    ds_id, job_id = str(uuid.uuid4()), str(uuid.uuid4())
    with session_scope() as s:
        s.add(Dataset(id=ds_id, tenant_id=owner_id, name="private", format="csv", n_rows=4,
                      n_features=1, classes={"a": 2, "b": 2}, sparse=False,
                      storage_path=f"datasets/{ds_id}"))
        s.flush()
        s.add(Job(id=job_id, tenant_id=owner_id, dataset_id=ds_id, algorithm="odm",
                  state="QUEUED", model_name="secret-job"))
    page = page_guard.page
    page_guard.expect(404, f"/jobs/{job_id}")
    sign_in(page, api_server, key, f"/jobs/{job_id}")
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "Could not load this page" in alert.inner_text()
    assert "secret-job" not in page.content()
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.locator("#jobs-table .empty-state").wait_for()  # none of the owner's jobs listed
    page_guard.check()


def test_pasted_rows_and_chart_helpers(page_guard, api_server: str) -> None:
    """The page's own parsers and axis helpers, run in the browser on the shipped modules."""
    page = page_guard.page
    page.goto(f"{api_server}/dashboard")
    out = page.evaluate("""async () => {
      const { parseRows } = await import('/dashboard/assets/pages/model.js');
      const { historyAxis } = await import('/dashboard/assets/pages/job.js');
      const { niceTicks } = await import('/dashboard/assets/charts.js');
      let bad = null;
      try { parseRows('1, x, 3'); } catch (e) { bad = e.message; }
      return {
        dense: parseRows('1, 2.5, -3\\n4 5 6e-1'),
        libsvm: parseRows('+1 1:0.5 3:-2\\n2:1'),
        json: parseRows('[[1, 2], [3, 4]]'),
        flat: parseRows('[1, 2]'),
        bad,
        levels: historyAxis([{ level: 0 }, { level: 1 }]),
        epochs: historyAxis([{ epoch: 1 }, { epoch: 2 }]),
        steps: historyAxis([{ n_iter: 3 }, { n_iter: 4 }]),
        ticks: niceTicks(0, 1, 5),
      };
    }""")
    assert out["dense"] == [[1, 2.5, -3], [4, 5, 0.6]]
    assert out["libsvm"] == [{"0": 0.5, "2": -2}, {"1": 1}]  # 1-based in, 0-based keys out
    assert out["json"] == [[1, 2], [3, 4]] and out["flat"] == [[1, 2]]
    assert out["bad"] == 'row 1: "x" is not a number'
    assert out["levels"] == {"xs": [0, 1], "name": "level"}
    assert out["epochs"] == {"xs": [1, 2], "name": "epoch"}
    assert out["steps"] == {"xs": [1, 2], "name": "step"}
    assert out["ticks"] == [0, 0.2, 0.4, 0.6, 0.8, 1]
    page_guard.check()
