"""The process supervisor of ``sodm run``: keeps the API and the worker running.

A child that exits while nobody asked is restarted with a log line saying how it ended (exit
code or signal); the other keeps running, so a killed worker never takes the API down. What
a dead worker leaves in its process group (a pool child) is killed first; its job's lease
expires and the reaper re-queues it. A child that keeps dying within ``QUICK_EXIT_SECONDS``
of its start is restarted after a doubling pause, and given up on after ``MAX_QUICK_EXITS``
such exits in a row (then everything stops with that child's exit code). SIGINT/SIGTERM are
forwarded once to every child, which then get ``STOP_SECONDS`` to finish.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

log = logging.getLogger("sodm.run")

QUICK_EXIT_SECONDS = 10.0
MAX_QUICK_EXITS = 5
STOP_SECONDS = 40.0
POLL_SECONDS = 0.2


def describe_exit(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL`` for a Popen return code."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class Child:
    """One supervised command (in its own process group: a terminal's Ctrl-C reaches only
    the supervisor, which forwards it once)."""

    name: str
    argv: Sequence[str]
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    started: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None
    restarts: int = 0
    history: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.proc = subprocess.Popen(list(self.argv), env=self.env, start_new_session=True)
        self.started = time.monotonic()
        self.restart_at = None

    def kill_group(self) -> None:
        """Kill what the dead child left in its process group (e.g. a Celery pool child)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class Supervisor:
    def __init__(self, children: list[Child], sleep: Callable[[float], None] = time.sleep):
        self.children = children
        self.sleep = sleep
        self.stopping: int | None = None
        self.code = 0

    def forward(self, signum: int, _frame: object = None) -> None:
        if self.stopping is not None:
            return
        self.stopping = signum
        for c in self.children:
            if c.proc is not None and c.proc.poll() is None:
                c.proc.send_signal(signum)

    def run(self) -> int:
        for c in self.children:
            c.start()
        while self.stopping is None:
            for c in self.children:
                self._check(c)
            self.sleep(POLL_SECONDS)
        self._wait_all()
        return self.code

    def _check(self, c: Child) -> None:
        now = time.monotonic()
        if c.restart_at is not None:
            if now >= c.restart_at and self.stopping is None:
                c.start()
                log.warning("%s restarted (restart %d)", c.name, c.restarts)
            return
        code = c.proc.poll() if c.proc is not None else None
        if code is None:
            return
        c.kill_group()
        c.quick_exits = c.quick_exits + 1 if now - c.started < QUICK_EXIT_SECONDS else 0
        how = describe_exit(code)
        c.history.append(how)
        if c.quick_exits >= MAX_QUICK_EXITS:
            log.error("%s %s %d times within %.0f s of starting; stopping everything",
                      c.name, how, c.quick_exits, QUICK_EXIT_SECONDS)
            self.code = code if code > 0 else 1
            self.forward(signal.SIGTERM)
            return
        delay = 0.0 if c.quick_exits == 0 else min(30.0, 2.0 ** (c.quick_exits - 1))
        c.restarts += 1
        c.restart_at = now + delay
        log.warning("%s %s (pid %d); restarting it%s; the other processes keep running",
                    c.name, how, c.proc.pid, f" in {delay:.0f} s" if delay else "")

    def _wait_all(self) -> None:
        deadline = time.monotonic() + STOP_SECONDS
        for c in self.children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
            c.kill_group()
