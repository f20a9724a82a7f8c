"""Where an API process's time goes: py-spy samples of a running server, bucketed by phase.

``start_py_spy(pid, seconds, out)`` records raw (collapsed) stacks of the API process (and its
worker processes with ``subprocesses``) while ``bench/serving.py`` drives it with wrk;
``summarize(out, requests)`` puts every sampled stack in the first phase whose pattern matches
a frame, walking from the innermost frame outwards (logging counts as logging wherever it is called
from), the generic phases (database, HTTP server and framework) only where no specific one
matches (so a database call made by the key lookup counts as the key lookup),
and reports each phase's share and its milliseconds of thread time per request.

py-spy records only threads that are running; samples whose innermost frame is a wait (the
event loop's poll, an executor thread waiting for work), which ``--nonblocking`` sampling
sometimes records, are dropped as idle. The total is the busy thread time, which can exceed
the wall time when several threads run at once.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 250  # samples per second

# (phase, pattern on one frame "function (file:line)"), checked innermost frame first;
# GENERIC phases count only a stack that no PHASES pattern matches
PHASES: list[tuple[str, re.Pattern[str]]] = [
    ("rate limit", re.compile(r"^(Limiter\.|_Counting\.)|/limits/|redis/asyncio")),
    ("logging", re.compile(r"\(logging/|access_log|structlog|\blog_request")),
    ("metrics", re.compile(r"prometheus_client")),
    ("kernel sum", re.compile(r"solver/|_numba_kernels|decision_function|app/services/"
                              r"(evaluator|batcher)\.py")),
    ("model cache", re.compile(r"app/services/predictor\.py:\d+\)$|model_io|load_model")),
    ("key lookup (auth)", re.compile(r"app/auth\.py|app/services/apikeys\.py|"
                                     r"app/services/cache\.py")),
    ("model row lookup", re.compile(r"app/services/models\.py")),
    ("serialization", re.compile(r"serialize_response|jsonable_encoder|json/encoder\.py|"
                                 r"\brender \(|_response\b.*predict|dump_json")),
    ("JSON parse + validation", re.compile(r"json/decoder\.py|json/__init__\.py|pydantic|"
                                           r"parse_instances|_parse_body|read_body|"
                                           r"request_body_to_args|_get_body|\bbody \(")),
]
GENERIC: list[tuple[str, re.Pattern[str]]] = [
    ("database (other)", re.compile(r"sqlalchemy|psycopg")),
    ("HTTP server + framework", re.compile(r"uvicorn|h11|httptools|starlette|fastapi|anyio|"
                                           r"asyncio|concurrent/futures|threading\.py")),
]


def start_py_spy(pid: int, seconds: float, out: Path, subprocesses: bool) -> subprocess.Popen:
    """Start ``py-spy record`` on ``pid`` for ``seconds`` (raw output to ``out``)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    cmd = [exe, "record", "--pid", str(pid), "--duration", str(int(seconds)),
           "--rate", str(RATE), "--format", "raw", "--nonblocking", "-o", str(out)]
    if subprocesses:
        cmd.append("--subprocesses")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# an innermost frame that is a wait, not work: the event loop in epoll (py-spy's
# --nonblocking sampling does not always tell), an executor thread waiting for a task
IDLE = re.compile(r"^(Runner\.run \(asyncio/runners\.py|_worker \(concurrent/futures/"
                  r"thread\.py|Condition\.wait \(|WorkerThread\.run \(anyio)")


def phase_of(stack: str) -> str:
    frames = stack.split(";")
    if IDLE.match(frames[-1]):
        return "idle"
    for phases in (PHASES, GENERIC):
        for frame in reversed(frames):
            for name, pattern in phases:
                if pattern.search(frame):
                    return name
    return "other"


def summarize(raw: Path, requests: int) -> dict[str, Any]:
    """Each phase's share of the busy samples and its thread milliseconds per request."""
    counts: Counter[str] = Counter()
    if raw.is_file():
        for line in raw.read_text(errors="replace").splitlines():
            stack, _, n = line.rpartition(" ")
            if stack and n.isdigit():
                counts[phase_of(stack)] += int(n)
    counts.pop("idle", None)
    total = sum(counts.values())
    phases = {name: {"samples": n, "share": round(n / total, 4) if total else 0.0,
                     "ms_per_request": round(1e3 * n / RATE / max(1, requests), 4)}
              for name, n in counts.most_common()}
    return {"rate_hz": RATE, "busy_samples": total, "requests": requests,
            "busy_ms_per_request": round(1e3 * total / RATE / max(1, requests), 4),
            "phases": phases}


def table(profile: dict[str, Any]) -> str:
    """A markdown table of one profile."""
    lines = ["| phase | share of busy time | ms per request |", "|---|---|---|"]
    for name, p in profile["phases"].items():
        lines.append(f"| {name} | {100 * p['share']:.1f} % | {p['ms_per_request']:.3f} |")
    lines.append(f"| total (busy thread time) | 100 % | {profile['busy_ms_per_request']:.3f} |")
    return "\n".join(lines)
