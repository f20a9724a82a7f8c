"""One measured task in its own process (``python -m bench.child SPEC.json`` runs one inline).

:func:`run_task` forks the task from a fork server that has imported and warmed up every
method (``bench.warm``: numba's disk cache loaded, first-call overheads paid), so no method pays
import or JIT-load time inside its fit; the task starts its own process group, and a task that
reaches its wall-clock cap is killed with its pool workers.  Resources of the task:

* ``cores``: the task (and so every process it starts) is pinned to that many CPUs
  (``sched_setaffinity``) and BLAS runs that many threads (threadpoolctl); ``n_jobs`` is the
  method's own process count;
* ``cpus``: pin to exactly these CPUs instead (the benchmark's two one-core lanes);
* ``cpu_cap_s``: a CPU-time cap per process (``RLIMIT_CPU``; a process past it is killed and
  the task reports ``{"status": "cpu_cap"}``): on a shared machine a wall-clock cap fires
  early whenever others hold the cores, a CPU cap does not.  The cap is the fit's: a fit
  task's ``predict`` on the test split gets a cap of its own size after it, so a model too
  slow to predict is not reported as a fit over the cap.  It counts from the child's start,
  so loading or generating the data (seconds) counts toward it too.  The wall-clock cap of
  :func:`run_task` stays as a backstop;
* ``mem_gib``: an address-space cap (``RLIMIT_AS``, inherited by every process the task
  starts, so each pool worker has its own); an allocation past it fails and the task reports
  ``{"status": "oom", "mem_gib": ...}`` instead of taking the machine down.  Spark tasks get
  no cap (the JVM reserves address space far beyond what it touches).

Tasks:

* ``fit``: load the cached split, build the method's estimator, measure ``fit`` and
  ``predict`` with :class:`bench.proc_meter.TreeMeter` (wall seconds, CPU seconds of the whole
  process tree, peak RSS of the tree), test accuracy, #SV, the model's file size and a hash
  of the test predictions (the same model gives the same hash);
* ``cv``: 3-fold stratified CV of the family's reference method over a grid on a subsample.

``peak_rss_mb`` is the larger of this process's ``ru_maxrss`` and the largest RSS sum over
the process tree seen by the meter; ``base_rss_mb`` is the RSS after imports and data loading,
before the task.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import multiprocessing as mp
import os
import resource
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from bench.proc_meter import TreeMeter


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _n_sv(est: Any) -> int | None:
    """Support vectors (kernel models); Nystroem: its landmarks; linear ODM: instances
    outside the theta band."""
    est = getattr(est, "steps", [[None, est]])[0][1] if hasattr(est, "steps") else est
    if getattr(est, "support_vectors_", None) is not None:
        return int(est.support_vectors_.shape[0])
    if getattr(est, "n_support_", None) is not None:
        return int(np.sum(est.n_support_))
    if getattr(est, "components_", None) is not None:  # Nystroem landmarks
        return int(est.components_.shape[0])
    return None


def model_bytes(est: Any) -> int | None:
    """Bytes of the stored model: our estimators in their file format
    (``solver.io.model_io.dumps``, a deflated zip of .npy arrays); scikit-learn ones as a
    deflated ``.npz`` of every fitted array attribute (every step of a pipeline), the same
    kind of container."""
    est = getattr(est, "model_", None) or est  # the Spark rows wrap a fitted SODMClassifier
    try:
        from solver.io.model_io import dumps

        return len(dumps(est))
    except (ValueError, TypeError, AttributeError):
        pass
    arrays: dict[str, np.ndarray] = {}
    steps = [s for _, s in est.steps] if hasattr(est, "steps") else [est]
    for k, step in enumerate(steps):
        for name, val in vars(step).items():
            if name.endswith("_") and isinstance(val, np.ndarray) and val.dtype != object:
                arrays[f"{k}.{name}"] = val
    if not arrays:
        return None
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return len(buf.getvalue())


def _fit_task(spec: dict, data: dict) -> dict:
    from bench.methods import METHODS

    method = METHODS[spec["method"]]
    params = dict(spec["params"], d=int(data["X_train"].shape[1]))
    est = method.make(params, int(spec["seed"]), int(spec["n_jobs"]))
    X, y = data["X_train"], data["y_train"]
    with TreeMeter() as fit:
        est.fit(X, y)
    if spec.get("cpu_cap_s"):
        _allow_cpu(float(spec["cpu_cap_s"]))
    with TreeMeter() as pred_m:
        pred = est.predict(data["X_test"])
    n_test = int(len(data["y_test"]))
    out = {"fit_s": fit.wall_seconds, "fit_cpu_s": fit.cpu_seconds,
           "fit_peak_rss_mb": fit.peak_rss / 2**20,
           "predict_s": pred_m.wall_seconds, "predict_cpu_s": pred_m.cpu_seconds,
           "predict_s_per_1k": pred_m.wall_seconds * 1000.0 / max(n_test, 1),
           "accuracy": float(np.mean(pred == data["y_test"])),
           "n_sv": _n_sv(est), "model_bytes": model_bytes(est),
           "predictions_sha1": hashlib.sha1(np.asarray(pred > 0).tobytes()).hexdigest()[:12],
           "n_train": int(len(y)), "n_test": n_test}
    info = getattr(est, "fit_info_", None) or getattr(getattr(est, "model_", None),
                                                      "fit_info_", None)
    if info:
        out["n_iter"] = [int(v) for v in info.get("n_iter", [])]
    hist = getattr(est, "history_", None)
    if hist:
        keys = ("level", "partitions", "partition_size", "n_iter", "seconds", "n_sv",
                "skipped_partitions", "converged")
        out["history"] = [{k: h[k] for k in keys if k in h} for h in hist
                          if isinstance(h, dict)]
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


def _limit(spec: dict) -> None:
    """Pin the task to ``cores`` CPUs and cap its address space (see the module docstring)."""
    cores = spec.get("cores")
    if spec.get("cpus"):
        os.sched_setaffinity(0, [int(c) for c in spec["cpus"]])
    elif cores:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cpus[: int(cores)])
    if spec.get("cpu_cap_s"):
        # the hard limit leaves room for the prediction's own cap (_allow_cpu)
        cap_s = int(math.ceil(float(spec["cpu_cap_s"])))
        resource.setrlimit(resource.RLIMIT_CPU, (cap_s, 2 * cap_s + 5))
    mem = spec.get("mem_gib")
    if mem:
        cap = int(float(mem) * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _allow_cpu(cap_s: float) -> None:
    """Let this process use ``cap_s`` more CPU seconds from now (raises the soft
    ``RLIMIT_CPU`` within the hard limit ``_limit`` set)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(math.ceil(r.ru_utime + r.ru_stime + cap_s))
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard - 5)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _execute(spec: dict) -> dict:
    from threadpoolctl import threadpool_limits

    warnings.simplefilter("ignore")
    if isinstance(spec["data"], dict):  # generated data of the scaling study
        from bench.susy import susy_like

        data = susy_like(int(spec["data"]["n"]), seed=int(spec["data"].get("seed", 0)))
    else:
        with np.load(spec["data"]) as z:
            data = {k: z[k] for k in z.files}
    base = _rss_mb()
    task = _fit_task if spec["task"] == "fit" else _cv_task
    _limit(spec)
    try:
        with TreeMeter() as meter, threadpool_limits(limits=int(spec.get("cores") or 2)):
            out = task(spec, data)
    except MemoryError:
        return {"status": "oom", "mem_gib": spec.get("mem_gib"), "base_rss_mb": base}
    maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    out.update(status="ok", base_rss_mb=base, task_cpu_s=meter.cpu_seconds,
               peak_rss_mb=max(maxrss_mb, meter.peak_rss / 2**20), self_maxrss_mb=maxrss_mb)
    return out


def _entry(spec: dict, out_path: str) -> None:
    os.setsid()  # own process group: a timeout kills the task and its pool workers together
    try:
        out = _execute(spec)
    except Exception as exc:  # reported as the row's status, the run goes on
        out = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    Path(out_path).write_text(json.dumps(out))


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
            if spec.get("cpu_cap_s") and proc.exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
                return {"status": "cpu_cap", "cpu_cap_s": spec["cpu_cap_s"],
                        "returncode": proc.exitcode}
            if spec.get("mem_gib") and proc.exitcode in (-signal.SIGSEGV, -signal.SIGABRT,
                                                         -signal.SIGBUS):
                # a native allocation past RLIMIT_AS (C++ bad_alloc aborts, NULL from malloc)
                return {"status": "oom", "mem_gib": spec["mem_gib"],
                        "returncode": proc.exitcode}
            return {"status": "error", "returncode": proc.exitcode}
        out = json.loads(out_path.read_text())
        out["wall_s"] = time.perf_counter() - t0
        return out


if __name__ == "__main__":
    spec_file = sys.argv[1]
    print(json.dumps(_execute(json.loads(Path(spec_file).read_text()))))
