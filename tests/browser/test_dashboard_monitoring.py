"""The model page draws the live served margins against the held-out ones, with the drift
verdict; the dataset page shows the content hash and the earlier upload of the same data."""

from __future__ import annotations

import time

import httpx
import pytest

from solver import ODMClassifier
from tests.browser.test_dashboard import sign_in, snap
from tests.service.jobs_helpers import libsvm_bytes, load_libsvm
from tests.service.model_rows import register_model
from tests.service.test_monitoring import shifted

pytestmark = pytest.mark.browser


def test_live_margins_against_training(page_guard, start_api, make_tenant, datasets_dir,
                                       screenshot) -> None:
    tenant_id, key = make_tenant()
    server = start_api(SODM_MONITOR_FLUSH_SECONDS="0.2")
    X, y = load_libsvm(datasets_dir, "svmguide1")
    Xt, _ = load_libsvm(datasets_dir, "svmguide1.t", n_features=X.shape[1])
    est = ODMClassifier(kernel="rbf", gamma=1.0, lam=100.0, theta=0.3).fit(X, y)
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        first = c.post("/datasets", files={"file": ("guide.libsvm",
                                                    libsvm_bytes(datasets_dir, "svmguide1"))})
        again = c.post("/datasets", files={"file": ("guide-again.libsvm",
                                                    libsvm_bytes(datasets_dir, "svmguide1"))})
        assert first.status_code == again.status_code == 201
        first, again = first.json(), again.json()
        model_id = register_model(tenant_id, first["id"], est, "guide-live",
                                  X_held_out=Xt[:2000])
        moved = shifted(X, Xt[2000:3000])
        for s in range(0, len(moved), 250):
            r = c.post("/predict", json={"model_id": model_id,
                                         "instances": moved[s:s + 250].tolist()})
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 60
        while c.get(f"/models/{model_id}/monitoring").json()["live"]["n"] < len(moved):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    page = page_guard.page
    sign_in(page, server.url, key, f"/models/{model_id}")
    page.get_by_role("heading", name="Live margins").wait_for()
    chart = page.locator('[data-chart="margin-live"] svg')
    chart.wait_for()
    assert chart.get_attribute("data-live") == str(len(moved))
    series = chart.locator("path[data-series]")
    assert sorted(series.evaluate_all("els => els.map(e => e.dataset.series)")) == [
        "live", "training (held-out)"]
    assert page.locator("#monitoring-drift").inner_text() == "drift"
    assert float(page.locator("#monitoring-psi").inner_text()) > 0.2
    assert page.locator("#dataset-sha").inner_text() == first["content_sha256"]
    snap(page, screenshot, "model-live-margins")

    page.goto(f"{server.url}/dashboard/datasets/{again['id']}")
    page.locator("#content-sha", has_text=first["content_sha256"]).wait_for()
    page.get_by_role("link", name=first["id"][:8]).wait_for()
