"""The API's HTTP protocol (``app.api.http_protocol``) on a real uvicorn server in this process,
serving a small ASGI application, over real sockets: the head limits answer 414/431 before
the head is complete, slow heads and bodies get 408, an idle connection is closed, one
address's connections are capped, the server's own pauses are not charged to the client,
and keep-alive and pipelined requests still work. ``HeadScanner`` on its own first."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator

import pytest
import uvicorn

from app.api.http_protocol import (
    HeadLimit,
    HeadLimits,
    HeadScanner,
    LimitedHttpToolsProtocol,
    edge_settings,
)
from app.core.config import get_settings

LIMITS = HeadLimits(request_line=64, header=48, block=200)
HEAD = b"GET /some/path?q=1 HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"


def _scan(data: bytes, cuts: list[int]) -> tuple[int, HeadLimit | None, bool]:
    """Feed ``data`` cut at ``cuts``; (bytes taken as head, the limit passed, done)."""
    s = HeadScanner(LIMITS)
    taken, pieces = 0, [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    for piece in pieces:
        used, passed = s.feed(piece)
        taken += used
        if passed is not None or s.done:
            return taken, passed, s.done
    return taken, None, s.done


@pytest.mark.parametrize("ends", [b"\r\n", b"\n"])
def test_scanner_finds_the_end_of_the_head_however_it_is_cut(ends: bytes) -> None:
    head = HEAD.replace(b"\r\n", ends)
    data = head + b"BODY\r\n\r\nmore"
    for cut in range(1, len(data)):
        for second in (cut, min(cut + 3, len(data) - 1)):
            cuts = sorted({cut, second})
            assert _scan(data, cuts) == (len(head), None, True), cuts


def test_scanner_limits_each_part_of_the_head() -> None:
    long_line = b"GET /" + b"a" * 80 + b" HTTP/1.1\r\n"
    assert _scan(long_line, [])[1:] == (HeadLimit.REQUEST_LINE, False)
    # an open line is refused before its end arrives
    assert _scan(b"GET /" + b"a" * 70, [])[1] == HeadLimit.REQUEST_LINE
    header = b"GET / HTTP/1.1\r\nX-Long: " + b"b" * 60
    assert _scan(header, [30])[1] == HeadLimit.HEADER
    many = b"GET / HTTP/1.1\r\n" + b"X-A: 1234567890\r\n" * 20
    taken, passed, _ = _scan(many, [5, 50])
    assert passed == HeadLimit.HEADER_BLOCK and taken <= 16 + 200 + 17
    blanks = b"\r\n" * 150  # blank lines before a request line count in the block
    assert _scan(blanks, [])[1] == HeadLimit.HEADER_BLOCK
    ok = b"\r\nGET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 10 + b"\r\n"
    assert _scan(ok, [3]) == (len(ok), None, True)


# ------------------------------------------------------------------ a real uvicorn server
async def _app(scope, receive, send) -> None:
    """GET: 200 "ok". POST: reads the body (``/slow-reader``: after 3 s) and answers its
    length. ``/events`` records whether the body ended in a disconnect."""
    if scope["type"] != "http":
        return
    if scope["method"] == "POST":
        if scope["path"] == "/slow-reader":
            await asyncio.sleep(3)
        size, message = 0, {"more_body": True}
        while message.get("more_body"):
            message = await receive()
            if message["type"] == "http.disconnect":
                EVENTS.append("disconnect")
                return
            size += len(message.get("body", b""))
        body = str(size).encode()
    else:
        body = b"ok"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


EVENTS: list[str] = []


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., int]]:
    """``serve(**SODM_settings)`` -> the port of a uvicorn server with our protocol."""
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(**env: str) -> int:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        get_settings.cache_clear()
        edge_settings.cache_clear()
        config = uvicorn.Config(_app, host="0.0.0.0", port=0, lifespan="off",
                                http=LimitedHttpToolsProtocol, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        servers.append((server, thread))
        return server.servers[0].sockets[0].getsockname()[1]

    EVENTS.clear()
    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(30)
    get_settings.cache_clear()
    edge_settings.cache_clear()


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    return s


# bytes read past one answer (the next pipelined answer's start), kept for the next read
_AHEAD: weakref.WeakKeyDictionary[socket.socket, bytes] = weakref.WeakKeyDictionary()


def _answer(s: socket.socket) -> tuple[int, dict[str, str], bytes, bool]:
    """Read one answer: (status, headers, body, whether the server then closed). One recv
    may hold the start of the next answer (pipelined requests); it is kept for the next
    call on the same socket."""
    data = _AHEAD.pop(s, b"")
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"closed without an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    size = int(headers.get("content-length", 0))
    while len(body) < size:
        body += s.recv(65536)
    if len(body) > size:
        _AHEAD[s] = body[size:]
        body = body[:size]
    closed = False
    if headers.get("connection") == "close":
        with contextlib.suppress(ConnectionResetError):
            closed = s.recv(1) == b""
    return int(lines[0].split()[1]), headers, body, closed


def _get(port: int, source: str = "127.0.0.1") -> int:
    with _connect(port, source) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return _answer(s)[0]


def test_a_huge_header_is_refused_before_its_end_arrives(serve) -> None:
    """A header that never ends: 431 after the limit, without the head's end; the
    connection is closed; others are served meanwhile. (A client that sends less than
    ``LINGER_BYTES`` past the refusal reads the answer; one that keeps streaming is reset.)"""
    port = serve()
    with _connect(port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        s.sendall(b"a" * 48 * 1024)  # 6 times SODM_LIMIT_HEADER_BYTES (8 KiB), no end
        status, headers, body, closed = _answer(s)
    problem = json.loads(body)
    assert status == 431 and headers["content-type"] == "application/problem+json"
    assert problem["setting"] == "SODM_LIMIT_HEADER_BYTES" and problem["limit_bytes"] == 8192
    assert closed
    assert _get(port) == 200


def test_streaming_attacker_is_stopped_and_the_server_answers_others(serve) -> None:
    """A client streaming a 200 MB header without reading: its connection is refused and
    closed (it sees the answer or a reset), and a GET meanwhile is answered."""
    port = serve()
    outcome: list[str] = []

    def attack() -> None:
        with _connect(port) as s:
            try:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
                for _ in range(200):
                    s.sendall(b"a" * (1 << 20))
                outcome.append("sent everything")
            except OSError as exc:
                outcome.append(type(exc).__name__)

    t = threading.Thread(target=attack)
    t.start()
    try:
        for _ in range(5):
            assert _get(port) == 200
    finally:
        t.join(60)
    assert outcome and outcome != ["sent everything"], outcome


def test_request_line_and_header_block_limits(serve) -> None:
    port = serve(SODM_LIMIT_HEADER_BLOCK_BYTES="4096")
    with _connect(port) as s:
        s.sendall(b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        status, _, body, closed = _answer(s)
    assert status == 414 and json.loads(body)["setting"] == "SODM_LIMIT_REQUEST_LINE_BYTES"
    assert closed
    with _connect(port) as s:
        s.sendall(b"GET / HTTP/1.1\r\n" + b"X-Some: 0123456789012345678901234567\r\n" * 200)
        status, _, body, closed = _answer(s)
    assert status == 431 and json.loads(body)["setting"] == "SODM_LIMIT_HEADER_BLOCK_BYTES"
    assert closed
    # just within every limit: served
    with _connect(port) as s:
        s.sendall(b"GET /" + b"x" * 8000 + b" HTTP/1.1\r\nHost: x\r\nX-A: " + b"y" * 4000
                  + b"\r\n\r\n")
        assert _answer(s)[0] == 200


def test_a_slow_head_gets_408_and_an_idle_connection_is_closed(serve) -> None:
    port = serve(SODM_HEADER_TIMEOUT_SECONDS="1")
    with _connect(port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        with contextlib.suppress(OSError):
            for _ in range(100):  # a byte every 0.1 s: never done within the deadline
                s.sendall(b"X")
                time.sleep(0.1)
        status, _, body, closed = _answer(s)
        assert status == 408 and "SODM_HEADER_TIMEOUT_SECONDS" in json.loads(body)["detail"]
        assert closed and time.monotonic() - t0 < 20
    with _connect(port) as idle:  # sends nothing: closed without an answer
        assert idle.recv(100) == b""


def test_a_slow_body_gets_408_and_the_application_sees_a_disconnect(serve) -> None:
    port = serve(SODM_BODY_TIMEOUT_SECONDS="1", SODM_BODY_MIN_BYTES_PER_SECOND="100000")
    with _connect(port) as s:
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        t0 = time.monotonic()
        with contextlib.suppress(OSError):
            for _ in range(100):
                s.sendall(b"z")
                time.sleep(0.1)
        status, _, body, closed = _answer(s)
    assert status == 408 and "SODM_BODY_TIMEOUT_SECONDS" in json.loads(body)["detail"]
    assert closed and time.monotonic() - t0 < 10  # the body's deadline, not the head's 15 s
    deadline = time.monotonic() + 10
    while "disconnect" not in EVENTS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert EVENTS == ["disconnect"]


def test_the_servers_own_pause_is_not_charged_to_the_client(serve) -> None:
    """The application reads the body only after 3 s (uvicorn stops reading meanwhile):
    a 4 MB body sent at once is not 408 although the body deadline is 1 s."""
    port = serve(SODM_BODY_TIMEOUT_SECONDS="1", SODM_BODY_MIN_BYTES_PER_SECOND="1000000000")
    size = 4 << 20
    with _connect(port) as s:
        s.sendall(b"POST /slow-reader HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  + str(size).encode() + b"\r\n\r\n" + b"q" * size)
        status, _, body, _ = _answer(s)
    assert (status, body) == (200, str(size).encode())


def test_connections_per_address_are_capped(serve) -> None:
    port = serve(SODM_LIMIT_CONNECTIONS_PER_ADDRESS="2")
    held = [_connect(port), _connect(port)]
    try:
        for s in held:  # both open and served
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _answer(s)[0] == 200
        with _connect(port) as third:
            third.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body, closed = _answer(third)
        assert status == 429 and headers["retry-after"] == "1" and closed
        assert json.loads(body)["setting"] == "SODM_LIMIT_CONNECTIONS_PER_ADDRESS"
        assert _get(port, "127.0.0.2") == 200  # another address is not affected
    finally:
        held.pop().close()
    deadline = time.monotonic() + 10  # a closed connection frees its place
    while _get(port) != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    held[0].close()


def test_trusted_proxies_are_not_capped(serve) -> None:
    port = serve(SODM_LIMIT_CONNECTIONS_PER_ADDRESS="1", SODM_TRUSTED_PROXIES="127.0.0.0/8")
    held = [_connect(port) for _ in range(3)]
    try:
        for s in held:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _answer(s)[0] == 200
    finally:
        for s in held:
            s.close()


def test_keep_alive_and_pipelined_requests_still_work(serve) -> None:
    port = serve(SODM_LIMIT_HEADER_BLOCK_BYTES="1024")
    header = b"X-Pad: " + b"p" * 600 + b"\r\n"  # each head alone fits the block limit
    with _connect(port) as s:
        for _ in range(20):  # the count starts again with each request
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n")
            assert _answer(s)[0] == 200
        body = b"0123456789"
        s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n" + header + b"\r\n"
                  + body + b"GET / HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n")
        first, second = _answer(s), _answer(s)
    assert (first[0], first[2]) == (200, b"10") and (second[0], second[2]) == (200, b"ok")
