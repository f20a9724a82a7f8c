"""Rate limits that mean what they say, on a real uvicorn and Redis: a request is charged
for the body bytes actually read (chunked or not; a body cut short is refunded), a request
the limits allow can pass (a legal 63 MB ``/predict`` within the default 600 units), a
refused request costs nothing, an address's allowance never refuses a valid key, and
``X-Forwarded-For`` counts only from ``SODM_TRUSTED_PROXIES``."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import httpx

from tests.fixtures.aio import run_async

BUDGET = 600  # SODM_RATE_LIMIT_PER_MINUTE's default
PREDICT_UNIT = 100_000  # body bytes per unit of POST /predict (app.api.ratelimit.ROUTE_COSTS)


def _predict_body(size: int) -> bytes:
    """A JSON /predict body of exactly ``size`` bytes naming a model that does not exist
    (the route reads and parses all of it, then answers 404)."""
    head = b'{"model_id": "' + uuid.uuid4().hex.encode() + b'", "instances": [[0.0]]}'
    return head + b" " * (size - len(head))


def _source() -> str:
    """A loopback address of this test's own: address allowances are kept in Redis for a
    minute and shared by every API process of the test session."""
    return f"127.{uuid.uuid4().int % 250 + 2}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 1}"


def _from(address: str, timeout: float = 60) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=timeout)


def _remaining(response: httpx.Response) -> int:
    return int(response.headers["RateLimit"].split("r=")[1].split(";")[0])


def _stored_remaining(key: str) -> int:
    """The key's units left in Redis, read without counting."""
    from app.api import ratelimit
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import resolve_key

    with session_scope() as s:
        found = resolve_key(s, key)
        assert found is not None
        key_id = found[0].id

    async def peek() -> int:
        ratelimit.reset()
        try:
            return (await ratelimit.limiter().peek("key", key_id, BUDGET)).remaining
        finally:
            ratelimit.reset()

    return run_async(peek())


def _until_remaining(key: str, expected: int) -> None:
    """The charge is settled once the request is over (after its answer): wait for it."""
    deadline = time.monotonic() + 30
    while (left := _stored_remaining(key)) != expected:
        assert time.monotonic() < deadline, (left, expected)
        time.sleep(0.1)


def test_a_legal_63_mb_prediction_passes_and_a_refusal_costs_nothing(start_api, make_tenant
                                                                     ) -> None:
    server = start_api(SODM_RATE_LIMIT_PER_MINUTE=str(BUDGET))
    big = _predict_body(63_000_000)  # 631 units by its size: more than a minute's budget
    json_type = {"Content-Type": "application/json"}
    _, key = make_tenant()
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=120) as c:
        assert _remaining(c.get("/datasets")) == BUDGET - 1
        refused = c.post("/predict", content=big, headers=json_type)
        assert refused.status_code == 429  # 599 left: no room for the whole budget now
        assert _remaining(refused) == BUDGET - 1 and int(refused.headers["Retry-After"]) >= 1
        assert _remaining(c.get("/datasets")) == BUDGET - 2  # the refusal cost nothing
    _, fresh = make_tenant()
    with httpx.Client(base_url=server.url, timeout=120,
                      headers={"Authorization": f"Bearer {fresh}"}) as c:
        passed = c.post("/predict", content=big, headers=json_type)
        assert passed.status_code == 404, passed.text  # admitted: the model is unknown
        assert _remaining(passed) == 0  # charged the whole budget, no more


def test_chunked_bodies_pay_for_their_bytes_and_cut_bodies_are_refunded(start_api,
                                                                        make_tenant) -> None:
    server = start_api(SODM_RATE_LIMIT_PER_MINUTE=str(BUDGET))
    size = 50 * PREDICT_UNIT
    body = _predict_body(size)
    _, key = make_tenant()
    auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        for i in range(0, size, 65536):
            yield body[i:i + 65536]

    r = httpx.post(server.url + "/predict", content=chunks(), headers=auth, timeout=60)
    assert r.status_code == 404 and "content-length" not in r.request.headers
    assert _remaining(r) == BUDGET - 1  # admitted on the route's base cost
    _until_remaining(key, BUDGET - 51)  # then charged its 50 units of bytes

    # declares 50 units of body, sends 10 and leaves: charged 11 in all, not 51
    _, other = make_tenant()
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(f"POST /predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {other}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
                  + body[:10 * PREDICT_UNIT])
        time.sleep(1)
    _until_remaining(other, BUDGET - 11)


def test_a_spent_address_never_refuses_a_valid_key(start_api, make_tenant) -> None:
    server = start_api(SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE="3")
    bad = {"Authorization": "Bearer sodm_" + "x" * 32}
    with _from(_source()) as c:
        codes = [c.get(server.url + "/datasets", headers=bad).status_code for _ in range(4)]
        assert codes == [401, 401, 401, 429]
        _, key = make_tenant()  # never seen by this process: looked up, not refused
        good = c.get(server.url + "/datasets", headers={"Authorization": f"Bearer {key}"})
        assert good.status_code == 200 and good.headers["RateLimit-Policy"].startswith('"key"')
        assert c.get(server.url + "/datasets", headers=bad).status_code == 429


def test_forwarded_addresses_count_only_from_trusted_proxies(start_api) -> None:
    bad = {"Authorization": "Bearer sodm_" + "x" * 32}

    def codes(url: str, forwarded: list[str], source: str = "127.0.0.1") -> list[int]:
        with _from(source) as c:
            return [c.get(url + "/datasets", headers={**bad, "X-Forwarded-For": f}).status_code
                    for f in forwarded]

    rotating = [f"10.{uuid.uuid4().int % 250}.0.{i}" for i in range(1, 6)]
    # the default trusts no proxy: the peer (127.0.0.1) is the address, whatever it claims
    plain = start_api(SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE="3")
    assert codes(plain.url, rotating, _source()) == [401, 401, 401, 429, 429]
    # behind a trusted proxy each forwarded client has its own allowance, and a client
    # cannot escape its own by prepending addresses (the rightmost untrusted one counts)
    proxied = start_api(SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE="3",
                        SODM_TRUSTED_PROXIES="127.0.0.1")  # the proxy's address
    assert codes(proxied.url, rotating) == [401] * 5
    client = f"10.{uuid.uuid4().int % 250}.9.9"
    spoofed = [f"{a}, {client}" for a in rotating]
    assert codes(proxied.url, spoofed) == [401, 401, 401, 429, 429]
