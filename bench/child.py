"""One measured task in its own process (``python -m bench.child SPEC.json`` runs one inline).

:func:`run_task` forks the task from a fork server that has imported and warmed up every
method (``bench.warm``: numba's disk cache loaded, first-call overheads paid), so no method pays
import or JIT-load time inside its fit; the task starts its own process group, and a task that
reaches its wall-clock cap is killed with its pool workers.  Tasks:

* ``fit``: load the cached split, build the method's estimator, time ``fit`` and ``predict``
  (``time.perf_counter``), test accuracy, #SV;
* ``cv``: 3-fold stratified CV of the family's reference method over a grid on a subsample.

Memory: ``peak_rss_mb`` is the larger of this process's ``ru_maxrss`` and the largest sum of
RSS over this process and all its descendants (pool workers, fork server), sampled every
20 ms with psutil during the task; ``base_rss_mb`` is the RSS after imports and data loading,
before the task, so ``peak - base`` is what the fit itself added.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np


class _PeakSampler:
    """Largest RSS sum over this process tree, sampled in a thread."""

    def __init__(self, interval: float = 0.02) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> int:
        total = self._proc.memory_info().rss
        for child in self._proc.children(recursive=True):
            with contextlib.suppress(Exception):  # a worker may exit while being read
                total += child.memory_info().rss
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self._interval)

    def __enter__(self) -> _PeakSampler:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _n_sv(est: Any) -> int | None:
    """Support vectors (kernel models); linear ODM: instances outside the theta band."""
    if getattr(est, "support_vectors_", None) is not None:
        return int(est.support_vectors_.shape[0])
    if getattr(est, "n_support_", None) is not None:
        return int(np.sum(est.n_support_))
    return None


def _fit_task(spec: dict, data: dict) -> dict:
    from bench.methods import METHODS

    method = METHODS[spec["method"]]
    params = dict(spec["params"], d=int(data["X_train"].shape[1]))
    est = method.make(params, int(spec["seed"]), int(spec["n_jobs"]))
    X, y = data["X_train"], data["y_train"]
    t0 = time.perf_counter()
    est.fit(X, y)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = est.predict(data["X_test"])
    predict_s = time.perf_counter() - t0
    out = {"fit_s": fit_s, "predict_s": predict_s,
           "accuracy": float(np.mean(pred == data["y_test"])),
           "n_sv": _n_sv(est), "n_train": int(len(y)), "n_test": int(len(data["y_test"]))}
    info = getattr(est, "fit_info_", None)
    if info:
        out["n_iter"] = [int(v) for v in info.get("n_iter", [])]
    hist = getattr(est, "history_", None)
    if hist:
        out["levels"] = sorted({int(h["level"]) for h in hist if "level" in h}, reverse=True)
    return out


def _cv_task(spec: dict, data: dict) -> dict:
    from sklearn.model_selection import StratifiedKFold

    from bench.methods import METHODS

    method = METHODS[spec["method"]]
    X, y = data["X_train"], data["y_train"]
    d = int(X.shape[1])
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    table = []
    for point in spec["grid"]:
        t0 = time.perf_counter()
        accs = []
        for tr, va in folds:
            est = method.make(dict(point, d=d), 0, 1)
            est.fit(X[tr], y[tr])
            accs.append(float(np.mean(est.predict(X[va]) == y[va])))
        table.append({"params": point, "cv_accuracy": float(np.mean(accs)),
                      "seconds": time.perf_counter() - t0})
    best = max(table, key=lambda r: r["cv_accuracy"])  # first of ties: grid order
    return {"best": best["params"], "best_cv_accuracy": best["cv_accuracy"], "table": table,
            "n_rows": int(len(y))}


def _execute(spec: dict) -> dict:
    warnings.simplefilter("ignore")
    if isinstance(spec["data"], dict):  # generated data of the scaling study
        from bench.scaling import susy_like

        data = susy_like(int(spec["data"]["n"]), seed=int(spec["data"].get("seed", 0)))
    else:
        with np.load(spec["data"]) as z:
            data = {k: z[k] for k in z.files}
    base = _rss_mb()
    task = _fit_task if spec["task"] == "fit" else _cv_task
    with _PeakSampler() as sampler:
        out = task(spec, data)
    maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    out.update(status="ok", base_rss_mb=base,
               peak_rss_mb=max(maxrss_mb, sampler.peak / 2**20), self_maxrss_mb=maxrss_mb)
    return out


def _entry(spec: dict, out_path: str) -> None:
    os.setsid()  # own process group: a timeout kills the task and its pool workers together
    Path(out_path).write_text(json.dumps(_execute(spec)))


_CTX = None


def _context():
    """Fork server that has imported and warmed every method (see ``bench.warm``)."""
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["bench.warm"])
    return _CTX


def run_task(spec: dict, timeout_s: float) -> dict:
    """Run ``spec`` in a child process; ``{"status": "timeout" | "error", ...}`` on failure."""
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        out_path = Path(tmp) / "out.json"
        t0 = time.perf_counter()
        proc = _context().Process(target=_entry, args=(spec, str(out_path)))
        proc.start()
        proc.join(timeout_s)
        timed_out = proc.is_alive()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the task (if capped) and stray workers
        proc.join()
        if timed_out:
            return {"status": "timeout", "timeout_s": timeout_s}
        if proc.exitcode != 0 or not out_path.exists():
            return {"status": "error", "returncode": proc.exitcode}
        out = json.loads(out_path.read_text())
        out["wall_s"] = time.perf_counter() - t0
        return out


if __name__ == "__main__":
    spec_file = sys.argv[1]
    print(json.dumps(_execute(json.loads(Path(spec_file).read_text()))))
