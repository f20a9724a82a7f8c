"""``sodm run``'s supervisor on real child processes: a killed child is restarted with a log
line saying how it died while the other keeps running; one that keeps dying at start is
given up on; a forwarded SIGTERM stops everything."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

import pytest

from app import supervise
from app.supervise import Child, Supervisor, describe_exit

# SIGINT at its default action from exec on, whatever this process inherited (a run started
# in the background by a non-interactive shell ignores SIGINT, and so would ``sleep``)
SLEEPER = ["env", "--default-signal=INT", "sleep", "600"]


def _until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_describe_exit() -> None:
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(3) == "exit code 3"


def test_a_killed_child_is_restarted_and_the_other_keeps_running(caplog) -> None:
    api, worker = Child("API", SLEEPER), Child("worker", SLEEPER)
    sup = Supervisor([api, worker])
    runner = threading.Thread(target=sup.run)
    with caplog.at_level(logging.WARNING, logger="sodm.run"):
        runner.start()
        try:
            _until(lambda: worker.proc is not None and api.proc is not None)
            first, api_pid = worker.proc.pid, api.proc.pid
            worker.proc.send_signal(signal.SIGKILL)
            _until(lambda: worker.restarts == 1 and worker.proc.pid != first
                   and worker.proc.poll() is None)
            assert api.proc.pid == api_pid and api.proc.poll() is None
            assert worker.history == ["killed by SIGKILL"]
            assert any("worker killed by SIGKILL" in r.getMessage() and "restarting" in
                       r.getMessage() for r in caplog.records), caplog.text
        finally:
            sup.forward(signal.SIGTERM)
            runner.join(timeout=60)
    assert not runner.is_alive()
    assert api.proc.poll() is not None and worker.proc.poll() is not None
    assert sup.code == 0


def test_a_child_that_keeps_dying_at_start_stops_everything(monkeypatch) -> None:
    monkeypatch.setattr(supervise, "MAX_QUICK_EXITS", 3)
    pauses: list[float] = []
    crash = Child("API", [sys.executable, "-c", "raise SystemExit(4)"])
    other = Child("worker", SLEEPER)
    sup = Supervisor([crash, other])
    original = sup._check

    def check(c: Child) -> None:  # restart at once instead of after the doubling pause
        original(c)
        if c.restart_at is not None:
            pauses.append(round(c.restart_at - time.monotonic()))
            c.restart_at = time.monotonic()

    monkeypatch.setattr(sup, "_check", check)
    assert sup.run() == 4
    assert crash.history == ["exit code 4"] * 3
    assert pauses[:2] == [1, 2]  # the pause doubles while the child keeps dying quickly
    assert other.proc.poll() is not None  # stopped with everything


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_forwarded_signal_reaches_every_child_once(signum: int) -> None:
    children = [Child("API", SLEEPER), Child("worker", SLEEPER)]
    sup = Supervisor(children)
    runner = threading.Thread(target=sup.run)
    runner.start()
    _until(lambda: all(c.proc is not None for c in children))
    sup.forward(signum)
    sup.forward(signum)  # a second Ctrl-C is not forwarded again
    runner.join(timeout=60)
    assert [c.proc.returncode for c in children] == [-signum, -signum]
    assert all(c.restarts == 0 for c in children)
