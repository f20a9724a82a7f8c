"""The model registry on the real stack: aliases (a new version never moves one), /predict by
name@alias / name@version / name@latest / id with the model's name, version and classes in
the answer, tags and description by PATCH, list filters by dataset, name, alias and tag."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.service.jobs_helpers import submit, upload_as, wait_job

ROWS = [[0.1] * 13, [-0.5] * 13]


def _train(c: httpx.Client, dataset_id: str, name: str) -> dict:
    job = submit(c, {"dataset_id": dataset_id, "algorithm": "odm", "name": name, "seed": 1,
                     "params": {"kernel": "linear"}})
    done = wait_job(c, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    return c.get(f"/models/{done['model_id']}").json()


@pytest.fixture(scope="module")
def tenant(make_tenant):
    """A tenant of this module's own: other modules' aliases and names never show here."""
    return make_tenant()


@pytest.fixture(scope="module")
def versions(api_server, tenant, datasets_dir, worker):
    """reg v1 and v2 on one upload of heart_scale, reg-other v1 on another."""
    first = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    second = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        v1 = _train(c, first["id"], "reg")
        v2 = _train(c, first["id"], "reg")
        other = _train(c, second["id"], "reg-other")
    assert (v1["version"], v2["version"], other["version"]) == (1, 2, 1)
    return {"v1": v1, "v2": v2, "other": other, "first": first, "second": second}


def _predict(c: httpx.Client, ref: str) -> httpx.Response:
    return c.post("/predict", json={"model": ref, "instances": ROWS})


def _problem(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    return r.json()


def test_aliases_resolve_and_never_move_with_a_new_version(client, versions, make_tenant,
                                                           api_server):
    v1, v2 = versions["v1"], versions["v2"]
    r = client.put("/models/reg/aliases/champion", json={"version": 1})
    assert r.status_code == 200, r.text
    assert r.json() | {"updated_at": None} == {
        "name": "reg", "alias": "champion", "model_id": v1["id"], "version": 1,
        "updated_at": None, "links": {"model": f"/models/{v1['id']}"}}
    out = _predict(client, "reg@champion").json()
    assert (out["model_id"], out["model_name"], out["version"]) == (v1["id"], "reg", 1)
    assert out["classes"] == [-1, 1] and len(out["labels"]) == 2
    # a new version of the name leaves the alias where it was; name and name@latest move
    v3 = _train(client, versions["first"]["id"], "reg")
    assert v3["version"] == 3
    assert _predict(client, "reg@champion").json()["model_id"] == v1["id"]
    assert _predict(client, "reg").json()["version"] == 3
    assert _predict(client, "reg@latest").json()["version"] == 3
    assert _predict(client, "reg@2").json()["model_id"] == v2["id"]
    # moving it (by model id) is the only way it changes
    r = client.put("/models/reg/aliases/champion", json={"model_id": v2["id"]})
    assert r.status_code == 200 and r.json()["version"] == 2
    assert _predict(client, "reg@champion").json()["model_id"] == v2["id"]
    client.put("/models/reg/aliases/challenger", json={"version": 3}).raise_for_status()
    aliases = client.get("/models/reg/aliases").json()["items"]
    assert [(a["alias"], a["version"]) for a in aliases] == [("challenger", 3),
                                                            ("champion", 2)]
    assert client.get(f"/models/{v2['id']}").json()["aliases"] == ["champion"]
    listed = client.get("/models", params={"alias": "champion"}).json()["items"]
    assert [m["id"] for m in listed] == [v2["id"]]
    # another tenant sees none of it
    _, key = make_tenant()
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as other:
        _problem(_predict(other, "reg@champion"), 404)
        assert other.get("/models/reg/aliases").json()["items"] == []
        _problem(other.put("/models/reg/aliases/champion", json={"version": 1}), 404)
    # deleting an alias, then deleting the version another alias points at
    assert client.delete("/models/reg/aliases/champion").status_code == 204
    body = _problem(_predict(client, "reg@champion"), 404)
    assert "champion" in body["detail"]
    _problem(client.delete("/models/reg/aliases/champion"), 404)
    assert client.delete(f"/models/{v3['id']}").status_code == 204
    assert client.get("/models/reg/aliases").json()["items"] == []
    _problem(_predict(client, "reg@challenger"), 404)


def test_alias_requests_that_are_refused(client, versions):
    other = versions["other"]
    body = _problem(client.put("/models/reg/aliases/latest", json={"version": 1}), 422)
    assert body["errors"][0]["field"] == "alias"
    _problem(client.put("/models/reg/aliases/7up", json={"version": 1}), 422)  # not a letter
    _problem(client.put("/models/reg/aliases/x", json={}), 422)
    _problem(client.put("/models/reg/aliases/x", json={"version": 1,
                                                       "model_id": other["id"]}), 422)
    body = _problem(client.put("/models/reg/aliases/x", json={"model_id": other["id"]}), 422)
    assert body["errors"][0]["field"] == "model_id" and "reg-other" in body["detail"]
    _problem(client.put("/models/reg/aliases/x", json={"version": 99}), 404)
    _problem(client.put("/models/no-such/aliases/x", json={"version": 1}), 404)
    _problem(_predict(client, "reg@no-such-alias"), 404)
    _problem(_predict(client, "reg@bad alias!"), 422)
    # a version past the INTEGER column is simply not there; a non-ASCII digit is no version
    body = _problem(_predict(client, "reg@" + "9" * 30), 404)
    assert "9" * 30 in body["detail"]
    _problem(_predict(client, "reg@2147483648"), 404)
    _problem(_predict(client, "reg@\u00b2"), 422)
    _problem(client.delete("/models/reg/aliases/never-set"), 404)


def test_tags_description_and_list_filters(client, versions):
    v1, v2, other = versions["v1"], versions["v2"], versions["other"]
    r = client.patch(f"/models/{v1['id']}", json={"description": "first try",
                                                  "tags": ["team=risk", "prod", "prod"]})
    assert r.status_code == 200, r.text
    assert r.json()["description"] == "first try" and r.json()["tags"] == ["prod", "team=risk"]
    client.patch(f"/models/{other['id']}", json={"tags": ["prod"]}).raise_for_status()
    # PATCH without tags keeps them; with tags replaces the whole set
    r = client.patch(f"/models/{v1['id']}", json={"description": "kept tags"})
    assert r.json()["tags"] == ["prod", "team=risk"]
    assert client.get(f"/models/{v1['id']}").json()["description"] == "kept tags"

    def ids(**params) -> list[str]:
        r = client.get("/models", params=params)
        assert r.status_code == 200, r.text
        return [m["id"] for m in r.json()["items"]]

    assert set(ids(tag="prod")) == {v1["id"], other["id"]}
    assert ids(tag=["prod", "team=risk"]) == [v1["id"]]
    assert ids(tag="prod", name="reg-other") == [other["id"]]
    assert ids(dataset_id=versions["second"]["id"]) == [other["id"]]
    assert v2["id"] in ids(dataset_id=versions["first"]["id"], name="reg")
    assert ids(tag="nobody") == []
    client.patch(f"/models/{v1['id']}", json={"tags": []}).raise_for_status()
    assert ids(tag="team=risk") == []
    _problem(client.patch(f"/models/{v1['id']}", json={"tags": ["no spaces"]}), 422)
    _problem(client.patch(f"/models/{v1['id']}", json={"tags": [f"t{i}" for i in range(33)]}),
             422)
    _problem(client.patch(f"/models/{v1['id']}", json={"owner": "x"}), 422)
    # a NUL reached Postgres' text column: a 500 (issue 36); control characters are refused
    for text in ("nul\x00here", "bell\x07", "esc\x1b[31m"):
        body = _problem(client.patch(f"/models/{v1['id']}", json={"description": text}), 422)
        assert "description" in json.dumps(body["errors"]), body
    r = client.patch(f"/models/{v1['id']}", json={"description": "two\nlines\tand a tab"})
    assert r.status_code == 200 and r.json()["description"] == "two\nlines\tand a tab"
    _problem(client.get("/models", params={"tag": "no spaces"}), 422)
    _problem(client.patch("/models/no-such-model", json={"tags": []}), 404)


def test_moving_an_alias_reaches_every_api_process(start_api, tenant, versions):
    """Two API processes cache model rows for 300 s, so only the invalidation channel can
    make them forget: moving and deleting an alias through one is seen by both within 2 s."""
    import time

    long_ttl = {"SODM_MODEL_ROW_CACHE_SECONDS": "300"}
    a, b = start_api(**long_ttl), start_api(**long_ttl)
    auth = {"Authorization": f"Bearer {tenant[1]}"}
    v1, v2 = versions["v1"], versions["v2"]

    def served(server, ref: str) -> str | int:
        r = httpx.post(server.url + "/predict", json={"model": ref, "instances": ROWS},
                       headers=auth)
        return r.json()["model_id"] if r.status_code == 200 else r.status_code

    def until(pred, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not pred():
            assert time.monotonic() < deadline, "not seen in time"
            time.sleep(0.05)

    httpx.put(a.url + "/models/reg/aliases/live", json={"version": 1},
              headers=auth).raise_for_status()
    for s in (a, b):
        assert served(s, "reg@live") == v1["id"]  # now cached in both
    httpx.put(a.url + "/models/reg/aliases/live", json={"model_id": v2["id"]},
              headers=auth).raise_for_status()
    for s in (a, b):
        until(lambda s=s: served(s, "reg@live") == v2["id"], 2)
    assert httpx.delete(a.url + "/models/reg/aliases/live", headers=auth).status_code == 204
    for s in (a, b):
        until(lambda s=s: served(s, "reg@live") == 404, 2)
