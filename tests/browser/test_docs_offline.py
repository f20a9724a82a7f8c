"""``/docs`` with the network cut: Swagger UI comes from the package, so the page renders every
operation (and authorizes with a key and runs a call) when nothing outside 127.0.0.1 can be
reached."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


def test_docs_render_with_the_network_cut(page_guard, api_server: str, tenant, screenshot):
    page = page_guard.page
    outside: list[str] = []

    def cut(route) -> None:  # every request that leaves the loopback is refused and recorded
        url = route.request.url
        if url.startswith(("http://127.0.0.1:", "http://localhost:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort("internetdisconnected")

    page.context.route("**/*", cut)
    page.goto(api_server + "/docs")
    page.locator(".opblock").first.wait_for()
    assert page.locator(".info .title").first.inner_text().startswith("sodm")
    ops = page.locator(".opblock-summary-operation-id").all_inner_texts()
    assert {"train", "predict", "list_algorithms", "list_models"} <= set(ops), ops
    # the discriminated union of POST /train is rendered from the schema
    titles = page.locator(".models .json-schema-2020-12__title")
    titles.filter(has_text="SODMTrainRequest").first.wait_for()
    assert {"TrainRequest", "SVRGParams", "JobState"} <= set(titles.all_inner_texts())

    # authorize with a key and call GET /algorithms from the page
    page.get_by_role("button", name="Authorize").first.click()
    page.locator(".auth-container input").first.fill(tenant[1])
    page.locator(".auth-btn-wrapper button.authorize").click()
    page.locator(".btn-done").click()
    op = page.locator("#operations-algorithms-list_algorithms")
    op.locator(".opblock-summary").click()
    op.get_by_role("button", name="Try it out").click()
    op.get_by_role("button", name="Execute").click()
    op.locator(".live-responses-table tr.response .response-col_status").first.wait_for()
    status = op.locator(".live-responses-table tr.response .response-col_status").first.inner_text()
    assert status.strip().startswith("200"), status
    screenshot(page, "docs-offline")
    assert outside == [], outside
