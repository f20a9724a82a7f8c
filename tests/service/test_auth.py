"""Bearer-key authentication, tenant isolation and per-key rate limiting on a real server."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import select

from app.core.db import session_scope
from app.core.orm import ApiKey
from app.services.tenancy.apikeys import KEY_RE, revoke_key

# probes: ours and the Open Inference Protocol's server health and metadata
PUBLIC = {("GET", "/livez"), ("GET", "/readyz"), ("GET", "/v2"), ("GET", "/v2/health/live"),
          ("GET", "/v2/health/ready")}


def _problem_401(r: httpx.Response) -> None:
    assert r.status_code == 401, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["type"].endswith("/unauthorized")


@pytest.mark.parametrize("header", [None, "", "Basic dXNlcjpwYXNz", "Bearer", "Bearer\t-",
                                    "Bearer a b", "Token sodm_x", "Bearer sodm_short",
                                    "Bearer sodm_" + "A" * 32])
def test_missing_malformed_or_unknown_key_is_401(api_server: str, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header}
    _problem_401(httpx.get(api_server + "/datasets", headers=headers))


def test_revoked_key_is_401_immediately(api_server: str,
                                        make_tenant: Callable[..., tuple[str, str]]) -> None:
    _, key = make_tenant()
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(api_server + "/datasets", headers=auth).status_code == 200
    with session_scope() as s:
        assert revoke_key(s, key[:12]) == 1
    _problem_401(httpx.get(api_server + "/datasets", headers=auth))


def test_keys_are_random_and_stored_only_as_hashes(
        make_tenant: Callable[..., tuple[str, str]]) -> None:
    keys = [make_tenant()[1] for _ in range(3)]
    assert len(set(keys)) == 3
    for key in keys:
        assert KEY_RE.fullmatch(key)
        with session_scope() as s:
            row = s.scalar(select(ApiKey).where(ApiKey.prefix == key[:12]))
            assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
            stored = " ".join(str(getattr(row, c.key)) for c in ApiKey.__table__.columns)
        assert key not in stored and key[12:] not in stored


def test_every_non_public_route_needs_a_key(api_server: str) -> None:
    spec = httpx.get(api_server + "/openapi.json").json()
    assert httpx.get(api_server + "/docs").status_code == 200
    checked = 0
    for path, ops in spec["paths"].items():
        for method in ops:
            if (method.upper(), path) in PUBLIC or method.upper() not in (
                    "GET", "POST", "DELETE", "PUT", "PATCH"):
                continue
            if path.startswith("/dashboard") or path == "/":
                continue  # the dashboard page authenticates in the browser
            url = api_server + re.sub(r"\{[^}]+\}", "x", path)
            r = httpx.request(method.upper(), url)
            assert r.status_code == 401, (method, path, r.status_code)
            checked += 1
    assert checked >= 5  # datasets, train, jobs, models, predict at least


def test_other_tenants_dataset_is_404(client: httpx.Client, api_server: str,
                                      make_tenant: Callable[..., tuple[str, str]]) -> None:
    r = client.post("/datasets", files={"file": ("a.libsvm", b"1 1:1\n-1 1:2\n")})
    assert r.status_code == 201
    ds = r.json()["id"]
    _, other = make_tenant()
    with httpx.Client(base_url=api_server, headers={"Authorization": f"Bearer {other}"}) as c:
        assert c.get(f"/datasets/{ds}").status_code == 404
        assert c.delete(f"/datasets/{ds}").status_code == 404
        assert ds not in [d["id"] for d in c.get("/datasets").json()["items"]]
    assert client.get(f"/datasets/{ds}").status_code == 200  # still there for its owner


def test_rate_limit_429_per_key(start_api, make_tenant) -> None:
    server = start_api(SODM_RATE_LIMIT_PER_MINUTE="3")
    _, key_a = make_tenant()
    _, key_b = make_tenant()
    a = {"Authorization": f"Bearer {key_a}"}
    codes = [httpx.get(server.url + "/datasets", headers=a).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    r = httpx.get(server.url + "/datasets", headers=a)
    assert r.status_code == 429
    assert int(r.headers["retry-after"]) >= 1
    assert r.json()["type"].endswith("/rate-limited")
    # buckets are per key: another key is unaffected; public routes are not limited
    b = {"Authorization": f"Bearer {key_b}"}
    assert httpx.get(server.url + "/datasets", headers=b).status_code == 200
    assert httpx.get(server.url + "/livez", headers=a).status_code == 200
    assert key_a not in server.log_text() and key_b not in server.log_text()
