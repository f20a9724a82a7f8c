"""Webhooks (issue 37): registration and its SSRF refusals, Standard Webhooks signatures,
the outbox with retries and backoff, the re-check of the address at delivery time, the
registry's ``model.alias_moved`` events, and a real worker delivering a training job's end
to a real local receiver that is down at first and comes back.

The receiver is an HTTP server this process starts on 127.0.0.1, so the tests allow loopback
endpoints (``SODM_WEBHOOK_ALLOW_PRIVATE``) except where they check that it is refused. The
in-process tests run the sender's two steps themselves (``announce_jobs``, ``deliver_due``);
no worker runs in them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import delete
from standardwebhooks import Webhook as Verifier

from app.core.db import session_scope
from app.core.orm import Webhook, WebhookDelivery
from app.services.notifications import webhook_delivery
from app.services.notifications import webhook_endpoints as webhooks
from tests.fixtures.stack import reset_app_caches
from tests.service.jobs_helpers import libsvm_bytes, wait_job
from tests.service.webhook_receiver import Receiver, reserved_port

FAST_RETRIES = "0.3,0.3"


@pytest.fixture
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SODM_WEBHOOK_ALLOW_PRIVATE", "1")
    monkeypatch.setenv("SODM_WEBHOOK_RETRY_SECONDS", FAST_RETRIES)
    monkeypatch.setenv("SODM_WEBHOOK_TIMEOUT_SECONDS", "5")
    reset_app_caches()
    yield
    monkeypatch.undo()
    reset_app_caches()


@pytest.fixture(autouse=True)
def no_endpoints(stack_env: dict[str, str]) -> Iterator[None]:
    """Each test starts and ends with no endpoint registered: the endpoints and the outbox
    are shared, and an earlier test's endpoint (an unroutable IPv6 transition address, say)
    got every later test's events and held each drain for its whole timeout."""
    _drop_endpoints()
    yield
    _drop_endpoints()


def _drop_endpoints() -> None:
    with session_scope() as s:
        s.execute(delete(WebhookDelivery))
        s.execute(delete(Webhook))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def _announce() -> None:
    with session_scope() as s:
        webhooks.announce_jobs(s)


def _deliveries(api, hook_id: str) -> list[dict]:
    r = api.get(f"/webhooks/{hook_id}/deliveries")
    assert r.status_code == 200, r.text
    return r.json()["items"]


def _cancelled_job(api, datasets_dir) -> str:
    """A job that ends now: queued (on the test's ``private_queue``, which nobody reads),
    then cancelled by the API."""
    ds = api.post("/datasets", files={"file": ("heart.libsvm",
                                               libsvm_bytes(datasets_dir, "heart_scale"))})
    assert ds.status_code == 201, ds.text
    job = api.post("/train", json={"dataset_id": ds.json()["id"], "algorithm": "odm",
                                   "params": {"kernel": "linear", "lam": 1.0, "theta": 0.2},
                                   "name": "hooked"}).json()
    r = api.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code in (200, 202), r.text
    assert api.get(f"/jobs/{job['id']}").json()["state"] == "CANCELLED"
    return job["id"]


def _verify(secret: str, req) -> dict:
    """The Standard Webhooks check a receiver makes (the reference library)."""
    return Verifier(secret).verify(req.body, req.headers)


# ------------------------------------------------------------------ registration, SSRF
@pytest.mark.parametrize("url, words", [
    ("http://127.0.0.1:9/hook", "loopback"),
    ("http://localhost:8080/hook", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/hook", "loopback"),
    # IPv6 transition forms reaching an IPv4 address (issue 36): judged by that address
    ("http://[::ffff:10.0.0.1]/hook", "private (through IPv4-mapped 10.0.0.1)"),
    ("http://[2002:7f00:1::1]/hook", "loopback (through 6to4 127.0.0.1)"),
    ("http://[2002:a00:1::]/hook", "private (through 6to4 10.0.0.1)"),
    ("http://[64:ff9b::7f00:1]/hook", "loopback (through NAT64 127.0.0.1)"),
    ("http://[64:ff9b::a9fe:a9fe]/latest", "link-local (through NAT64 169.254.169.254)"),
    ("http://[64:ff9b:1::a00:1]/hook", "private (through NAT64 10.0.0.1)"),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/hook", "loopback (through Teredo 127.0.0.1)"),
    ("http://[2001:0:7f00:1::1]/hook", "loopback (through Teredo 127.0.0.1)"),
    ("http://[::ffff:0:7f00:1]/hook", "loopback (through IPv4-translated 127.0.0.1)"),
    ("http://[fec0::1]/hook", "site-local"),
    ("http://10.1.2.3/hook", "private"),
    ("https://192.168.0.10/hook", "private"),
    ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://100.64.0.1/hook", "not globally routable"),
    ("http://0.0.0.0/hook", "unspecified"),
    ("ftp://93.184.216.34/hook", "http:// or https://"),
    ("https://user:pw@93.184.216.34/hook", "credentials"),
    ("https://93.184.216.34/hook#x", "fragment"),
    ("http://no-such-host.invalid/hook", "does not resolve"),
    ("not a url", "spaces"),
])
def test_endpoints_in_private_networks_are_refused(api, url: str, words: str) -> None:
    r = api.post("/webhooks", json={"url": url, "events": ["job.succeeded"]})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["field"] == "url" and words in body["detail"], body


def test_register_list_get_delete(api, api_as, make_tenant) -> None:
    public = "https://93.184.216.34/hooks/sodm?team=risk"  # an address literal: no DNS
    r = api.post("/webhooks", json={"url": public, "events": ["job.failed", "job.succeeded"],
                                    "description": "pipeline"})
    assert r.status_code == 201, r.text
    hook = r.json()
    assert hook["secret"].startswith("whsec_")
    assert r.headers["location"] == f"/webhooks/{hook['id']}"
    assert hook["events"] == ["job.failed", "job.succeeded"]
    got = api.get(f"/webhooks/{hook['id']}").json()
    assert "secret" not in got and got["url"] == public
    assert hook["id"] in {h["id"] for h in api.get("/webhooks").json()["items"]}
    own = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODk="
    mine = api.post("/webhooks", json={"url": public, "events": ["model.alias_moved"],
                                       "secret": own}).json()
    assert mine["secret"] == own
    for bad in ({"url": public, "events": []}, {"url": public, "events": ["job.started"]},
                {"url": public, "events": ["job.failed"], "secret": "whsec_c2hvcnQ="},
                {"url": public, "events": ["job.failed"], "extra": 1}):
        assert api.post("/webhooks", json=bad).status_code == 422, bad
    stranger = api_as(make_tenant()[1])
    assert stranger.get(f"/webhooks/{hook['id']}").status_code == 404
    assert stranger.delete(f"/webhooks/{hook['id']}").status_code == 404
    assert stranger.get(f"/webhooks/{hook['id']}/deliveries").status_code == 404
    for h in (hook, mine):
        assert api.delete(f"/webhooks/{h['id']}").status_code == 204
        assert api.get(f"/webhooks/{h['id']}").status_code == 404


# -------------------------------------------------------------------------- deliveries
def test_a_job_end_is_delivered_signed(api, private_queue, loopback_allowed, receiver,
                                       datasets_dir) -> None:
    hook = api.post("/webhooks", json={"url": receiver.url,
                                       "events": ["job.cancelled", "job.succeeded"]}).json()
    deaf = api.post("/webhooks", json={"url": receiver.url, "events": ["job.failed"]}).json()
    job_id = _cancelled_job(api, datasets_dir)
    _announce()
    pending = _deliveries(api, hook["id"])
    ours = [d for d in pending if d["payload"]["data"]["job_id"] == job_id]
    assert len(ours) == 1 and ours[0]["status"] == "pending" and ours[0]["attempts"] == 0
    assert _deliveries(api, deaf["id"]) == []
    _announce()  # announced once only
    assert len(_deliveries(api, hook["id"])) == len(pending)
    while webhook_delivery.deliver_due():
        pass
    req = next(r for r in receiver.requests if r.headers["webhook-id"] == ours[0]["id"])
    assert req.path == "/hooks/sodm"
    event = _verify(hook["secret"], req)
    assert event["type"] == "job.cancelled" and event["data"]["job_id"] == job_id
    assert event["data"]["state"] == "CANCELLED"
    assert event["data"]["links"]["job"] == f"/jobs/{job_id}"
    assert req.headers["webhook-signature"].startswith("v1,")
    assert abs(int(req.headers["webhook-timestamp"]) - time.time()) < 120
    with pytest.raises(Exception, match="signature"):  # another secret does not verify
        Verifier(webhooks.new_secret()).verify(req.body, req.headers)
    done = next(d for d in _deliveries(api, hook["id"]) if d["id"] == ours[0]["id"])
    assert done["status"] == "delivered" and done["attempts"] == 1
    assert done["last_status_code"] == 204 and done["delivered_at"]
    assert done["next_attempt_at"] is None
    assert [d["id"] for d in _deliveries(api, hook["id"]) if d["status"] == "delivered"]
    filtered = api.get(f"/webhooks/{hook['id']}/deliveries", params={"status": "pending"})
    assert all(d["status"] == "pending" for d in filtered.json()["items"])


def test_an_endpoint_that_is_down_gets_it_when_it_comes_back(api, private_queue, loopback_allowed,
                                                             datasets_dir) -> None:
    port = reserved_port()
    hook = api.post("/webhooks", json={"url": f"http://127.0.0.1:{port}/in",
                                       "events": ["job.cancelled"]}).json()
    job_id = _cancelled_job(api, datasets_dir)
    _announce()
    webhook_delivery.deliver_due()
    [d] = _deliveries(api, hook["id"])
    assert d["status"] == "pending" and d["attempts"] == 1
    assert d["last_status_code"] is None and "ConnectError" in d["last_error"]
    assert webhook_delivery.deliver_due() == 0  # not due again before its backoff
    back = Receiver(port=port)
    try:
        deadline = time.monotonic() + 30
        while not back.requests and time.monotonic() < deadline:
            webhook_delivery.deliver_due()
            time.sleep(0.1)
        [req] = back.requests
        assert _verify(hook["secret"], req)["data"]["job_id"] == job_id
        [d] = _deliveries(api, hook["id"])
        assert d["status"] == "delivered" and d["attempts"] == 2
        assert req.headers["webhook-id"] == d["id"]
    finally:
        back.stop()


def test_retries_run_out_and_the_delivery_fails(api, private_queue, loopback_allowed, receiver,
                                                datasets_dir) -> None:
    receiver.status = 500
    hook = api.post("/webhooks", json={"url": receiver.url, "events": ["job.cancelled"]}).json()
    _cancelled_job(api, datasets_dir)
    _announce()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        webhook_delivery.deliver_due()
        [d] = _deliveries(api, hook["id"])
        if d["status"] != "pending":
            break
        time.sleep(0.1)
    assert d["status"] == "failed" and d["attempts"] == 1 + len(FAST_RETRIES.split(","))
    assert d["last_status_code"] == 500 and d["last_error"] == "HTTP 500"
    # every attempt had the same id and a fresh signature that verifies
    assert [r.headers["webhook-id"] for r in receiver.requests] == [d["id"]] * d["attempts"]
    stamps = [int(r.headers["webhook-timestamp"]) for r in receiver.requests]
    assert stamps == sorted(stamps)
    for r in receiver.requests:
        _verify(hook["secret"], r)


def test_the_address_is_checked_again_when_sending(api, private_queue, loopback_allowed, receiver,
                                                   datasets_dir, monkeypatch) -> None:
    """An endpoint accepted once (here: while loopback was allowed; in an attack: a name
    whose DNS answer changed since) is refused at delivery time; nothing is sent."""
    hook = api.post("/webhooks", json={"url": receiver.url, "events": ["job.cancelled"]}).json()
    _cancelled_job(api, datasets_dir)
    _announce()
    monkeypatch.setenv("SODM_WEBHOOK_ALLOW_PRIVATE", "0")
    reset_app_caches()
    webhook_delivery.deliver_due()
    [d] = _deliveries(api, hook["id"])
    assert d["attempts"] == 1 and d["last_error"].startswith("refused: ")
    assert "loopback" in d["last_error"] and receiver.requests == []


@pytest.mark.parametrize(("host", "words"), [
    ("[2002:7f00:1::1]", "through 6to4 127.0.0.1"),
    ("[64:ff9b::a00:1]", "through NAT64 10.0.0.1"),
    ("[2001:0:4136:e378:8000:63bf:80ff:fffe]", "through Teredo 127.0.0.1"),
    ("[::ffff:127.0.0.1]", "through IPv4-mapped 127.0.0.1"),
])
def test_transition_forms_are_refused_when_sending(api, private_queue, loopback_allowed,
                                                    datasets_dir, monkeypatch, host: str,
                                                    words: str) -> None:
    """The delivery-time check judges an IPv6 transition form by the IPv4 address it
    reaches, as the registration does (a name may resolve to one after registering)."""
    hook = api.post("/webhooks", json={"url": f"http://{host}:9/hook",
                                       "events": ["job.cancelled"]})
    assert hook.status_code == 201, hook.text
    _cancelled_job(api, datasets_dir)
    _announce()
    monkeypatch.setenv("SODM_WEBHOOK_ALLOW_PRIVATE", "0")
    reset_app_caches()
    webhook_delivery.deliver_due()
    [d] = _deliveries(api, hook.json()["id"])
    assert d["attempts"] == 1 and d["last_error"].startswith("refused: "), d
    assert words in d["last_error"], d


def test_an_endpoint_answering_a_byte_at_a_time_gets_the_timeout(
        api, private_queue, loopback_allowed, datasets_dir, monkeypatch) -> None:
    """``SODM_WEBHOOK_TIMEOUT_SECONDS`` bounds the whole attempt: httpx's timeouts bound
    each read, and an endpoint sending its status line a byte every 0.5 s held a sender
    (one of ``SODM_WEBHOOK_CONCURRENCY``, shared by every tenant) for as long as it had
    bytes: 62 s with a 1 s timeout, hours with a long header."""
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    sent: list[int] = []
    done = threading.Event()

    def dribble() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 200 + b"\r\n\r\n":
                if done.wait(0.5):
                    return
                try:
                    conn.send(bytes([b]))
                except OSError:  # the sender hung up: what the test waits for
                    return
                sent.append(b)

    t = threading.Thread(target=dribble, daemon=True)
    t.start()
    hook = api.post("/webhooks", json={"url": f"http://127.0.0.1:{srv.getsockname()[1]}/h",
                                       "events": ["job.cancelled"]}).json()
    _cancelled_job(api, datasets_dir)
    _announce()
    monkeypatch.setenv("SODM_WEBHOOK_TIMEOUT_SECONDS", "1")
    reset_app_caches()
    try:
        assert webhook_delivery.deliver_due() == 1
    finally:
        done.set()
        t.join(10)
        srv.close()
    [d] = _deliveries(api, hook["id"])
    assert d["attempts"] == 1 and d["status"] == "pending", d
    assert d["last_error"] == "no answer within 1 s", d
    assert 0 < len(sent) < 200  # it was still sending its status line


def test_moving_an_alias_is_an_event(api, tenant, loopback_allowed, receiver) -> None:
    import numpy as np

    from solver import ODMClassifier
    from tests.service.model_rows import register_model

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    y = np.where(X[:, 0] > 0, 1, -1)
    est = ODMClassifier(kernel="linear").fit(X, y)
    ds = api.post("/datasets", files={"file": ("t.csv", "label,a,b,c\n" + "\n".join(
        f"{lab},{a},{b},{c}" for lab, (a, b, c) in zip(y, X, strict=True)))}).json()
    v1 = register_model(tenant[0], ds["id"], est, "hooked-model")
    v2 = register_model(tenant[0], ds["id"], est, "hooked-model")
    hook = api.post("/webhooks", json={"url": receiver.url,
                                       "events": ["model.alias_moved"]}).json()
    for body in ({"version": 1}, {"version": 1}, {"model_id": v2}):  # the second: no move
        assert api.put("/models/hooked-model/aliases/champion", json=body).status_code == 200
    assert api.delete("/models/hooked-model/aliases/champion").status_code == 204
    while webhook_delivery.deliver_due():
        pass
    events = [_verify(hook["secret"], r) for r in receiver.wait_for(3)]
    data = [e["data"] for e in sorted(events, key=lambda e: e["timestamp"])]
    assert [e["type"] for e in events] == ["model.alias_moved"] * 3
    assert [(d["model_id"], d["previous_model_id"]) for d in data] == [
        (v1, None), (v2, v1), (None, v2)]
    assert data[0]["name"] == "hooked-model" and data[0]["alias"] == "champion"
    assert data[0]["version"] == 1 and data[1]["version"] == 2
    assert len(receiver.requests) == 3


def test_deleting_an_endpoint_drops_its_deliveries(api, private_queue, loopback_allowed, receiver,
                                                   datasets_dir) -> None:
    hook = api.post("/webhooks", json={"url": receiver.url, "events": ["job.cancelled"]}).json()
    _cancelled_job(api, datasets_dir)
    _announce()
    assert len(_deliveries(api, hook["id"])) == 1
    assert api.delete(f"/webhooks/{hook['id']}").status_code == 204
    while webhook_delivery.deliver_due():
        pass
    assert receiver.requests == []


# ---------------------------------------------------------------- a real worker sends
def test_a_worker_delivers_a_training_job_to_a_receiver_that_comes_back(
        api, start_worker, loopback_allowed, datasets_dir) -> None:
    """The worker's main process announces the job's end and retries the delivery while
    the receiver is down; the job succeeds regardless; once the receiver listens on its
    port the delivery arrives, signed."""
    start_worker(SODM_WEBHOOK_ALLOW_PRIVATE="1", SODM_WEBHOOK_POLL_SECONDS="0.2",
                 SODM_WEBHOOK_RETRY_SECONDS="0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5")
    port = reserved_port()
    hook = api.post("/webhooks", json={"url": f"http://127.0.0.1:{port}/sodm",
                                       "events": ["job.succeeded", "job.failed"]}).json()
    ds = api.post("/datasets", files={"file": ("heart.libsvm",
                                               libsvm_bytes(datasets_dir, "heart_scale"))})
    job = api.post("/train", json={"dataset_id": ds.json()["id"], "algorithm": "odm",
                                   "params": {"kernel": "linear", "lam": 1.0, "theta": 0.2},
                                   "name": "hooked-train"}).json()
    done = wait_job(api, job["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        items = _deliveries(api, hook["id"])
        if items and items[0]["attempts"] >= 2:
            break
        time.sleep(0.2)
    [d] = items
    assert d["status"] == "pending" and "ConnectError" in (d["last_error"] or ""), d
    back = Receiver(port=port)
    try:
        [req] = back.wait_for(1, timeout=60)
        event = _verify(hook["secret"], req)
        assert event["type"] == "job.succeeded"
        assert event["data"]["job_id"] == job["id"]
        assert event["data"]["model_id"] == done["model_id"]
        assert event["data"]["links"]["model"] == f"/models/{done['model_id']}"
        deadline = time.monotonic() + 30
        while _deliveries(api, hook["id"])[0]["status"] != "delivered":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        final = _deliveries(api, hook["id"])[0]
        # at least one attempt failed before (attempts count claims, the one in flight too)
        assert final["attempts"] >= max(2, d["attempts"]) and final["last_status_code"] == 204
        time.sleep(1.5)  # delivered once: no attempt after the 2xx
        assert len(back.requests) == 1
        assert json.loads(req.body)["data"]["state"] == "SUCCEEDED"
    finally:
        back.stop()
