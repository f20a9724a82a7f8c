"""The API's HTTP/1.1 protocol: uvicorn's httptools protocol with limits applied to the bytes
as they arrive, before its parser buffers them.

uvicorn (0.54) has no limit on a request line, a header or the header block, and httptools
gathers a header value that arrives over many reads by concatenation, so one request with a
100 MB header cost seconds of the event loop (every other client waited; measured in
docs/reliability.md, "The HTTP edge"). Nor does it time out a client that sends its request
slowly, or a connection that never sends one. ``LimitedHttpToolsProtocol`` (``sodm serve``,
``sodm run`` and the test stack run uvicorn with it: ``app.cli.uvicorn_options``) adds:

* ``HeadScanner``: counts each line of a request head as its bytes arrive; a request line
  over ``SODM_LIMIT_REQUEST_LINE_BYTES`` is answered 414, a header line over
  ``SODM_LIMIT_HEADER_BYTES`` or header lines over ``SODM_LIMIT_HEADER_BLOCK_BYTES`` in all
  431, before the parser sees the bytes that pass the limit;
* deadlines: a request head must arrive within ``SODM_HEADER_TIMEOUT_SECONDS`` of its first
  byte (a new connection's first head, of the connection); a body within
  ``SODM_BODY_TIMEOUT_SECONDS`` plus one second per ``SODM_BODY_MIN_BYTES_PER_SECOND``
  bytes received, not counting the time the server itself stopped reading (flow control: the
  application was busy). Past it: 408 (a connection that sent nothing is closed silently);
* ``SODM_LIMIT_CONNECTIONS_PER_ADDRESS`` open connections per client address in each API
  process; one more is answered 429 at once. Proxies in ``SODM_TRUSTED_PROXIES`` are exempt
  (their connections carry many clients; ``X-Forwarded-For`` is trusted only from them).

Every refusal is an ``application/problem+json`` answer naming the limit and its setting,
with ``Connection: close``; the connection's writing side is then shut and up to
``LINGER_BYTES`` of what the client still sends are read and dropped (a client that sent a
little too much finishes sending and reads the answer instead of a reset), and the
connection is closed when the client closes it, after ``LINGER_SECONDS``, or at once when
more than ``LINGER_BYTES`` arrive (a client that keeps streaming gets a reset).
"""

from __future__ import annotations

import asyncio
import enum
import ipaddress
import json
import logging
from collections import Counter as Tally
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus
from typing import Any

from prometheus_client import Counter
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.core.config import Settings, get_settings
from app.core.problems import PROBLEM_MEDIA_TYPE, ProblemError

log = logging.getLogger("sodm.http")

LINGER_SECONDS = 2.0
LINGER_BYTES = 64 << 10
REFUSED = Counter("sodm_http_refused_total",
                  "Connections answered by the HTTP protocol's own limits, by reason",
                  ["reason"])


class HeadLimit(enum.Enum):
    """A limit on a request head: (status, what passing it means, setting)."""

    REQUEST_LINE = (414, "the request line has more than {} bytes",
                    "SODM_LIMIT_REQUEST_LINE_BYTES")
    HEADER = (431, "a header line has more than {} bytes", "SODM_LIMIT_HEADER_BYTES")
    HEADER_BLOCK = (431, "the header lines have more than {} bytes in all",
                    "SODM_LIMIT_HEADER_BLOCK_BYTES")

    @property
    def status(self) -> int:
        return self.value[0]

    def says(self, size: int) -> str:
        return self.value[1].format(size)

    @property
    def setting(self) -> str:
        return self.value[2]


@dataclass(frozen=True)
class HeadLimits:
    """Bytes (line ends included) of the request line, of one header line, of all of them."""

    request_line: int
    header: int
    block: int

    def of(self, limit: HeadLimit) -> int:
        return {HeadLimit.REQUEST_LINE: self.request_line, HeadLimit.HEADER: self.header,
                HeadLimit.HEADER_BLOCK: self.block}[limit]


class HeadScanner:
    """Counts one request head as it arrives, line by line, and says where it ends.

    ``feed(data)`` returns how many bytes of ``data`` belong to the head (all of them while
    it is open; through the empty line that ends it) and the limit it has passed, if any.
    Empty lines before the request line (which parsers skip) count in the header block."""

    __slots__ = ("limits", "seen", "done", "_line", "_lines", "_block", "_cr")

    def __init__(self, limits: HeadLimits) -> None:
        self.limits = limits
        self.seen = 0  # bytes of this head so far
        self.done = False
        self._line = 0  # bytes of the open line
        self._lines = 0  # complete non-empty lines (the request line is the first)
        self._block = 0  # bytes of the lines after the request line (and of leading blanks)
        self._cr = False  # the last byte seen was a CR

    def feed(self, data: bytes | bytearray) -> tuple[int, HeadLimit | None]:
        pos, n = 0, len(data)
        while pos < n:
            nl = data.find(b"\n", pos)
            end = n if nl < 0 else nl + 1
            size = end - pos
            self.seen += size
            self._line += size
            if self._lines:
                self._block += size
            passed = self._passed()
            if passed is not None:
                return end, passed
            if nl < 0:
                self._cr = data[n - 1] == 0x0D
                return n, None
            before = data[nl - 1] == 0x0D if nl > pos else self._cr
            empty = self._line == 1 or (self._line == 2 and before)
            self._line, self._cr, pos = 0, False, end
            if not empty:
                self._lines += 1
            elif self._lines:
                self.done = True
                return end, None
            else:  # a blank line before the request line
                self._block += size
                if self._block > self.limits.block:
                    return end, HeadLimit.HEADER_BLOCK
        return n, None

    def _passed(self) -> HeadLimit | None:
        if not self._lines:
            return HeadLimit.REQUEST_LINE if self._line > self.limits.request_line else None
        if self._line > self.limits.header:
            return HeadLimit.HEADER
        return HeadLimit.HEADER_BLOCK if self._block > self.limits.block else None


class TrustedProxies:
    """Addresses and networks from ``SODM_TRUSTED_PROXIES`` (``*``: every address)."""

    def __init__(self, entries: list[str]) -> None:
        self.everyone = "*" in entries
        self.networks = [ipaddress.ip_network(e, strict=False) for e in entries if e != "*"]

    def __contains__(self, host: str) -> bool:
        if self.everyone:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


@dataclass(frozen=True)
class EdgeSettings:
    """What the protocol enforces (read once per process from the settings)."""

    head: HeadLimits
    header_timeout: float
    body_timeout: float
    body_min_rate: int
    connections_per_address: int
    trusted: TrustedProxies

    @classmethod
    def of(cls, s: Settings) -> EdgeSettings:
        return cls(HeadLimits(s.limit_request_line_bytes, s.limit_header_bytes,
                              s.limit_header_block_bytes),
                   s.header_timeout_seconds, s.body_timeout_seconds,
                   s.body_min_bytes_per_second, s.limit_connections_per_address,
                   TrustedProxies(s.trusted_proxies))


@lru_cache(maxsize=1)
def edge_settings() -> EdgeSettings:
    return EdgeSettings.of(get_settings())


_open: Tally[str] = Tally()  # open connections per client address in this process


def head_problem(limit: HeadLimit, limits: HeadLimits) -> ProblemError:
    size = limits.of(limit)
    title = "URI too long" if limit.status == 414 else "Request header fields too large"
    return ProblemError(limit.status, title,
                        detail=f"{limit.says(size)} ({limit.setting})",
                        type="request-head-too-large", limit_bytes=size, setting=limit.setting)


def timeout_problem(in_head: bool, edge: EdgeSettings) -> ProblemError:
    if in_head:
        detail = (f"the request head did not arrive within {edge.header_timeout:g} s "
                  "(SODM_HEADER_TIMEOUT_SECONDS)")
    else:
        detail = (f"the request body arrived too slowly: allowed {edge.body_timeout:g} s plus "
                  f"1 s per {edge.body_min_rate} bytes received (SODM_BODY_TIMEOUT_SECONDS, "
                  "SODM_BODY_MIN_BYTES_PER_SECOND)")
    return ProblemError(408, "Request timeout", detail=detail, type="request-timeout")


def connections_problem(cap: int) -> ProblemError:
    return ProblemError(429, "Too many connections",
                        detail=f"this client address has {cap} connections open to this API "
                               f"process, the most it may (SODM_LIMIT_CONNECTIONS_PER_ADDRESS)",
                        type="too-many-connections", limit=cap,
                        setting="SODM_LIMIT_CONNECTIONS_PER_ADDRESS",
                        headers={"Retry-After": "1"})


def render(problem: ProblemError) -> bytes:
    """The whole HTTP/1.1 answer of ``problem``, closing the connection."""
    body = json.dumps(problem.body()).encode()
    phrase = HTTPStatus(problem.status).phrase
    lines = [f"HTTP/1.1 {problem.status} {phrase}", f"content-type: {PROBLEM_MEDIA_TYPE}",
             f"content-length: {len(body)}", "connection: close",
             *(f"{k}: {v}" for k, v in problem.headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class PausingFlow(FlowControl):
    """uvicorn's flow control, also adding up how long reading was paused (the server, not
    the client, was the slow side then)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(transport)
        self._loop = loop
        self._paused_at: float | None = None
        self._paused_total = 0.0

    def pause_reading(self) -> None:
        if not self.read_paused:
            self._paused_at = self._loop.time()
        super().pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused and self._paused_at is not None:
            self._paused_total += self._loop.time() - self._paused_at
            self._paused_at = None
        super().resume_reading()

    def paused_seconds(self) -> float:
        now = self._loop.time()
        return self._paused_total + (now - self._paused_at if self._paused_at is not None
                                     else 0.0)


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` under the limits of the module docstring."""

    def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.edge = edge_settings()
        self._scan: HeadScanner | None = HeadScanner(self.edge.head)
        self._in_head = True  # the parser's state: reading a head, or between requests
        self._started = 0.0  # when the current head's or body's clock started
        self._body_bytes = 0
        self._paused_before = 0.0  # paused seconds before the body's clock started
        self._timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._dropped = 0  # bytes read and dropped after a refusal
        self._counted: str | None = None  # the address this connection counts against
        self._pflow: PausingFlow | None = None

    # connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._pflow = self.flow = PausingFlow(transport, self.loop)
        self._start_head_clock()  # a connection that sends nothing is closed after it
        host = self.client[0] if self.client else None
        cap = self.edge.connections_per_address
        if host is None or cap <= 0 or host in self.edge.trusted:
            return
        if _open[host] >= cap:
            REFUSED.labels("connections").inc()
            self._refuse(connections_problem(cap))
            return
        _open[host] += 1
        self._counted = host

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted is not None:
            _open[self._counted] -= 1
            if _open[self._counted] <= 0:
                del _open[self._counted]
            self._counted = None
        super().connection_lost(exc)

    # bytes in

    def data_received(self, data: bytes) -> None:
        if self._refused:
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:  # still streaming: no more reading for it
                self.transport.abort()
            return
        while data and not self._refused:
            scan = self._scan
            if not self._in_head or scan is None:
                self._body_bytes += len(data)
                super().data_received(data)
                return
            if not scan.seen:
                self._start_head_clock()
            used, passed = scan.feed(data)
            if passed is not None:
                REFUSED.labels(passed.name.lower()).inc()
                self._refuse(head_problem(passed, self.edge.head))
                return
            if scan.done:  # the parser completes this head with these bytes
                self._scan = HeadScanner(self.edge.head)
            piece, data = (data, b"") if used == len(data) else (data[:used], data[used:])
            super().data_received(piece)
            if self.transport.is_closing():
                return

    # parser callbacks (the parser's state decides which clock runs)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._started = self.loop.time()
        self._body_bytes = 0
        self._paused_before = self._pflow.paused_seconds() if self._pflow else 0.0
        self._arm(self._due())
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._scan = HeadScanner(self.edge.head)
        self._disarm()  # idle until the next head's first byte (the keep-alive timer runs)

    # deadlines

    def _start_head_clock(self) -> None:
        self._started = self.loop.time()
        self._arm(self._started + self.edge.header_timeout)

    def _due(self) -> float:
        if self._in_head:
            return self._started + self.edge.header_timeout
        rate = self.edge.body_min_rate
        paused = (self._pflow.paused_seconds() if self._pflow else 0.0) - self._paused_before
        return (self._started + self.edge.body_timeout + paused
                + (self._body_bytes / rate if rate > 0 else 0.0))

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(when, self._on_timer)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self._refused or self.transport is None or self.transport.is_closing():
            return
        if not self._in_head and self._pflow is not None and self._pflow.read_paused:
            self._arm(self.loop.time() + 1.0)  # the server is not reading: not the client's
            return
        due = self._due()
        if self.loop.time() < due:
            self._arm(due)
            return
        if self._in_head and (self._scan is None or not self._scan.seen):
            self.transport.close()  # nothing sent (a new or idle connection): no answer
            return
        cycle = self.cycle
        if not self._in_head and cycle is not None and cycle.response_started:
            self.transport.close()  # answered already; only the rest of the body is late
            return
        REFUSED.labels("head_timeout" if self._in_head else "body_timeout").inc()
        self._refuse(timeout_problem(self._in_head, self.edge))

    # refusal

    def _refuse(self, problem: ProblemError) -> None:
        """Answer ``problem``, stop parsing, shut the writing side, drop up to
        ``LINGER_BYTES`` of what still arrives and close after ``LINGER_SECONDS``."""
        self._refused = True
        self._disarm()
        self._unset_keepalive_if_required()
        log.debug("refused %s: %s", self.client[0] if self.client else "-", problem.detail)
        transport = self.transport
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:  # an answer is on its way: no room for another
                transport.abort()
                return
            cycle.disconnected = True  # the application's receive() sees a disconnect
            cycle.message_event.set()
        transport.write(render(problem))
        if transport.can_write_eof():
            transport.write_eof()
        self.flow.resume_reading()
        self._timer = self.loop.call_later(LINGER_SECONDS, transport.abort)
