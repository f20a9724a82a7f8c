"""The benchmark's CPU cap is the fit's: the prediction after it gets a cap of its own, so a
model that is slow to predict is not reported as a fit over the cap (``bench.child``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A task process capped at 2 CPU s: it burns to 1 CPU s (the "fit"), optionally gets the
# prediction's allowance, then burns to 3 CPU s (the "prediction").
SCRIPT = """
import resource, sys
from bench.child import _allow_cpu, _limit

def burn_to(total):
    while sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) < total:
        pass

_limit({"cpu_cap_s": 2})
burn_to(1.0)
if sys.argv[1] == "allow":
    _allow_cpu(2)
burn_to(3.0)
print("finished")
"""


def _run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_prediction_gets_its_own_cpu_cap() -> None:
    allowed = _run("allow")
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "finished" in allowed.stdout


def test_without_the_allowance_the_fit_cap_kills_the_task() -> None:
    capped = _run("none")
    assert capped.returncode == -signal.SIGXCPU, (capped.returncode, capped.stderr[-2000:])
    assert "finished" not in capped.stdout
