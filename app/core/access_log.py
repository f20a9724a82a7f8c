"""The API's per-request access line, at a few microseconds instead of structlog's ~100.

``app.core.logs`` renders every other record through structlog's processor chain; at thousands
of requests a second that chain was a third of a one-row ``/predict`` (docs/serving.md,
"What the access log costs"). The access line has a fixed shape, so it is rendered here
directly, in the same text (ConsoleRenderer's layout) or JSON form as the other lines, with
the context bound to the request (``request_id``), and handed to the root handler as a
pre-rendered record that ``Formatter`` passes through. ``Handler`` writes other records at
once, as before, but collects access lines and writes them together at most
``FLUSH_SECONDS`` apart (a write, and a reader's wake-up, per line cost as much again): a
line reaches the log within ``FLUSH_SECONDS``, or at once when any other record follows it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import orjson
import structlog
from structlog.contextvars import get_contextvars

LOGGER = "sodm.access"
FLUSH_SECONDS = 0.2
FLUSH_BYTES = 64 << 10

_logger = logging.getLogger(LOGGER)


_second: list[Any] = [-1, ""]  # the last whole second and its ISO text


def _timestamp() -> str:
    """structlog's ISO UTC timestamp (``2026-11-28T08:02:42.123456Z``), its date and
    time formatted once a second."""
    now = time.time()
    sec = int(now)
    if sec != _second[0]:
        _second[0], _second[1] = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return f"{_second[1]}.{int((now - sec) * 1e6):06d}Z"


def render(fmt: str, values: dict[str, Any]) -> str:
    """One access line of ``values`` (the request's fields and the bound context), as the
    other lines look."""
    ts = _timestamp()
    if fmt == "json":
        return orjson.dumps({**values, "event": "request", "level": "info",
                             "logger": LOGGER, "timestamp": ts},
                            default=str).decode()
    pairs = " ".join(f"{k}={values[k]}" for k in sorted(values))
    return f"{ts} [info     ] request                        [{LOGGER}] {pairs}"


def emit(fmt: str, **fields: Any) -> None:
    """Log one request (``method``, ``path``, ``status``, ``duration_ms``) if INFO is on
    for ``sodm.access``; the record's message is the rendered line."""
    if not _logger.isEnabledFor(logging.INFO):
        return
    values = {**get_contextvars(), **fields}
    record = logging.LogRecord(LOGGER, logging.INFO, __file__, 0, render(fmt, values),
                               None, None)
    record.sodm_rendered = True
    record.sodm_fields = values  # for readers of records (tests, filters)
    _logger.handle(record)


class Formatter(structlog.stdlib.ProcessorFormatter):
    """structlog's formatter, except for access lines, which arrive rendered."""

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "sodm_rendered", False):
            return record.getMessage()
        return super().format(record)


class Handler(logging.StreamHandler):
    """A stream handler that batches access lines (module docstring)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._pending: list[str] = []
        self._size = 0
        self._since = 0.0
        self._timer: threading.Thread | None = None
        self._timer_pid = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            if not getattr(record, "sodm_rendered", False):
                self._drain()
                self.stream.write(line + self.terminator)
                self.flush()
                return
            if not self._pending:
                self._since = time.monotonic()
                self._ensure_timer()
            self._pending.append(line)
            self._size += len(line)
            if self._size > FLUSH_BYTES or time.monotonic() - self._since > FLUSH_SECONDS:
                self._drain()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging must never raise into the request
            self.handleError(record)

    def _drain(self) -> None:
        """Write the collected access lines (the caller holds the handler's lock)."""
        if self._pending:
            lines, self._pending, self._size = self._pending, [], 0
            self.stream.write(self.terminator.join(lines) + self.terminator)
            self.flush()

    def flush_pending(self) -> None:
        self.acquire()
        try:
            self._drain()
        finally:
            self.release()

    def flush(self) -> None:
        if self._pending:  # called from _drain with the lines already taken
            self.flush_pending()
        super().flush()

    def _ensure_timer(self) -> None:
        """A thread that writes what an idle process collected (one per process)."""
        if self._timer is not None and self._timer_pid == os.getpid() and \
                self._timer.is_alive():
            return
        self._timer_pid = os.getpid()
        self._timer = threading.Thread(target=self._tick, daemon=True,
                                       name="sodm-access-log")
        self._timer.start()

    def _tick(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            if self._pending:
                try:
                    self.flush_pending()
                except Exception:  # noqa: BLE001 - a closed stream at exit
                    return
