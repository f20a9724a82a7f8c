"""Serving benchmark (issue 20): ``wrk`` against ``POST /predict`` on the real stack.

The model is SODM (rbf, defaults) trained on a seeded 80 % of ijcnn1 (about 32,400 support
vectors, cached under ``.data/bench-serving/``). For each ``--tree NAME=DIR`` (a checkout of
the service; ``DIR`` defaults to this one) in turn, in the same command: a fresh Postgres
database migrated by that tree, a tenant, the model registered by that tree's code, its API
started as ``python -m app.cli serve --workers N`` (Redis broker, rate limit raised but on),
then ``wrk``:

* single-row requests at 1 connection, then at 50 connections (one row of ijcnn1's test
  file, the same body every time);
* 1,000-row requests at 50 connections, against a plain numpy RBF kernel product of the same
  1,000 rows with the same support vectors, timed in this process between the server runs
  (``exp(-gamma * max(0, |x|^2 + |z|^2 - 2 X Z')) @ coef``, float64, numpy's threads);
* requests/s, predictions/s, p50/p99 latency (wrk's own latency histogram), errors (socket
  errors and non-2xx), the CPU seconds of wrk itself and of the API's process tree.

Scenarios ``v2single`` and ``v2batch`` send the same rows to the Open Inference Protocol's
``/v2/models/ijcnn1-rbf/versions/1/infer`` (JSON tensors) instead of ``/predict``.
``--as-run`` starts each tree as ``make run`` does (``python -m app.cli run``: SQLite, the
SQLAlchemy broker, a worker, the default number of API processes), changing only the rate
limit (one key could not pass the default 600 a minute).

``--profile`` also samples the API with py-spy during the runs and prints where its time
goes (``bench/serving_profile.py``). ``--offline`` adds batch decision values in this
process, rows/s on one thread: ours (``decision_function``), scikit-learn's
``SVC.decision_function`` on the same support vectors and coefficients, and onnxruntime on
the graph of ``solver.io.export.to_onnx_bytes`` once that export (issue 16) is there.

    apt-get install wrk
    .venv/bin/python -m bench.serving --tree after=. --workers 2 --profile
    .venv/bin/python -m bench.serving --tree before=../serving-before --tree after=.
    .venv/bin/python -m bench.serving --as-run --scenarios single-50 v2single-50

The machine's load average is recorded before and after each tree (a shared machine makes
throughput noisy: compare trees measured in the same command).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import lzma
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
CACHE = REPO / ".data" / "bench-serving"
MODEL_FILE = CACHE / "ijcnn1-rbf.sodm"
N_FEATURES = 22
REDIS_URL = "redis://127.0.0.1:6379"
# the same model through the Open Inference Protocol (JSON tensors; REGISTER's name)
V2_PATH = "/v2/models/ijcnn1-rbf/versions/1/infer"

# run by each tree's Python in that tree's directory (so its own app/ and migrations/)
REGISTER = r"""
import hashlib, json, os, shutil, sys
from pathlib import Path
sys.path.insert(0, os.getcwd())
url, data_dir, model_file, n_sv = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
os.environ.update(DATABASE_URL=url, SODM_DATA_DIR=str(data_dir))
from migrations import upgrade_head
upgrade_head(url)
from app.core.db import session_scope
from app.core.orm import Dataset, Job, Model, new_id
from app.services.tenancy.apikeys import create_key
rel = "models/bench.sodm"
(data_dir / "models").mkdir(parents=True, exist_ok=True)
shutil.copyfile(model_file, data_dir / rel)
import io, zipfile
import solver
from solver.io.model_io import load_model
with zipfile.ZipFile(model_file) as zin:
    header = json.loads(zin.read("header.json"))
    known = set(getattr(solver, header["estimator"])().get_params(deep=False))
    unknown = set(header["params"]) - known
    if unknown:
        # an older tree: estimator options added since, at their off value (None / False),
        # do not change the model; the file is rewritten without them, arrays unchanged
        if any(header["params"][k] not in (None, False) for k in unknown):
            raise SystemExit(f"the model sets options this tree lacks: {sorted(unknown)}")
        header["params"] = {k: v for k, v in header["params"].items() if k in known}
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                zout.writestr(info, json.dumps(header).encode()
                              if info.filename == "header.json" else zin.read(info))
        (data_dir / rel).write_bytes(buf.getvalue())
load_model(data_dir / rel)
sha = hashlib.sha256((data_dir / rel).read_bytes()).hexdigest()
with session_scope() as s:
    tenant, key = create_key(s, "bench")
    ds = Dataset(tenant_id=tenant.id, name="ijcnn1", format="libsvm", n_rows=39992,
                 n_features=22, classes={"-1": 1, "1": 1}, sparse=False,
                 storage_path="datasets/none", size_bytes=0, sha256="")
    s.add(ds); s.flush()
    job = Job(tenant_id=tenant.id, dataset_id=ds.id, algorithm="sodm", state="SUCCEEDED",
              params={"kernel": "rbf"}, request={})
    s.add(job); s.flush()
    # trees since migration 0011 keep the bytes in Postgres; older ones name the file
    stored = {"file_path": rel} if hasattr(Model, "file_path") else {}
    m = Model(id=new_id(), tenant_id=tenant.id, job_id=job.id, dataset_id=ds.id,
              name="ijcnn1-rbf", version=1, algorithm="sodm", n_features=22,
              classes=[-1, 1], n_support_vectors=int(n_sv), file_sha256=sha, **stored)
    s.add(m); s.flush()
    if not stored:
        from app.core.orm import ModelBlob
        s.add(ModelBlob(model_id=m.id, data=(data_dir / rel).read_bytes())); s.flush()
    job.model_id = m.id
    print(json.dumps({"key": key, "model_id": m.id}))
"""

WRK_LUA = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_KEY")
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""


# ---------------------------------------------------------------------------- model and data
def ensure_model() -> Path:
    """Train (once) SODM rbf on a seeded 80 % of ijcnn1 and save it in the model format."""
    if MODEL_FILE.is_file():
        return MODEL_FILE
    from sklearn.datasets import load_svmlight_file

    from solver.estimators import SODMClassifier
    from solver.io.model_io import save_model

    with lzma.open(DATASETS / "ijcnn1.xz", "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=N_FEATURES)
    X = X.toarray()
    idx = np.random.default_rng(0).permutation(len(y))[: int(0.8 * len(y))]
    est = SODMClassifier(kernel="rbf", random_state=0).fit(X[idx], y[idx])
    CACHE.mkdir(parents=True, exist_ok=True)
    save_model(est, MODEL_FILE)
    return MODEL_FILE


def test_rows(n: int) -> np.ndarray:
    """The first ``n`` rows of ijcnn1's test file (dense)."""
    from sklearn.datasets import load_svmlight_file

    with lzma.open(DATASETS / "ijcnn1.t.xz", "rb") as fh:
        X, _ = load_svmlight_file(fh, n_features=N_FEATURES)
    return np.asarray(X[:n].toarray(), dtype=np.float64)


def numpy_reference(est: Any, X: np.ndarray, repeats: int = 3) -> dict[str, float]:
    """Rows/s of a plain numpy RBF kernel product of ``X`` against the support vectors (the
    model's scaling included), best of ``repeats``, numpy's default threads."""
    Z0 = est._model_space(X)
    SV = np.ascontiguousarray(est._svz)
    coef = est.dual_coef_[0]
    g = float(est.gamma_)
    sb = np.einsum("ij,ij->i", SV, SV)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        Z = est._model_space(X)
        sa = np.einsum("ij,ij->i", Z, Z)
        K = np.exp(-g * np.maximum(sa[:, None] + sb[None, :] - 2.0 * (Z @ SV.T), 0.0))
        f = K @ coef
        best = min(best, time.perf_counter() - t0)
    err = float(np.max(np.abs(f - est.decision_function(X))))
    del Z0
    return {"rows": len(X), "rows_per_s": len(X) / best, "max_abs_diff_vs_model": err}


def offline_batch(est: Any, X: np.ndarray) -> dict[str, Any]:
    """Batch decision values in this process on one BLAS thread: ours, scikit-learn's
    ``SVC.decision_function`` with the same support vectors, gamma and coefficients, and
    onnxruntime on the exported graph when an exporter exists."""
    from sklearn.svm import SVC
    from threadpoolctl import threadpool_limits

    Z = est._model_space(X)
    SV = np.ascontiguousarray(est._svz)
    svc = SVC(kernel="rbf", gamma=float(est.gamma_))
    # fit on two of the support vectors to get a fitted object, then give it this model's
    # support vectors and coefficients (libsvm's decision_function reads these attributes)
    svc.fit(SV[:2], [0, 1])
    svc.support_vectors_ = SV
    svc.support_ = np.arange(len(SV), dtype=np.int32)
    svc._n_support = np.array([0, len(SV)], dtype=np.int32)
    svc._dual_coef_ = np.ascontiguousarray(est.dual_coef_, dtype=np.float64)
    svc.dual_coef_ = svc._dual_coef_
    svc._intercept_ = np.zeros(1)
    svc.intercept_ = np.zeros(1)
    svc.shape_fit_ = SV.shape

    def rate(f: Any, data: Any) -> tuple[float, np.ndarray]:
        out = f(data)
        t0 = time.perf_counter()
        out = f(data)
        return len(X) / (time.perf_counter() - t0), np.asarray(out).ravel()

    res: dict[str, Any] = {"rows": len(X), "n_support_vectors": len(SV)}
    with threadpool_limits(1):
        ours, f_ours = rate(est.decision_function, X)
        sk, f_sk = rate(svc.decision_function, Z)
        res["ours_rows_per_s"] = ours
        res["sklearn_svc_rows_per_s"] = sk
        # libsvm's sign convention for two classes: positive means classes_[0]
        res["sklearn_max_abs_diff"] = float(np.max(np.abs(np.abs(f_sk) - np.abs(f_ours))))
        try:
            import onnxruntime as ort

            from solver.io.export import to_onnx_bytes  # issue 16, part 5
        except ImportError as exc:
            res["onnxruntime_rows_per_s"] = None
            res["onnxruntime_note"] = f"not measured: {exc} (the ONNX export of issue 16)"
            return res
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(to_onnx_bytes(est), opts,
                                    providers=["CPUExecutionProvider"])
        onnx_rate, f_onnx = rate(lambda A: sess.run(["decision_function"], {"X": A})[0], X)
        res["onnxruntime_rows_per_s"] = onnx_rate
        res["onnxruntime_max_abs_diff"] = float(np.max(np.abs(f_onnx - f_ours)))
    return res


# -------------------------------------------------------------------------------- the stack
def create_database() -> tuple[str, Any]:
    sys.path.insert(0, str(REPO))
    from tests.fixtures.stack import create_database as create

    return create("sodm_bench_")


def cpu_of_tree(pid: int) -> float:
    """User + system CPU seconds of a process and its live children."""
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for q in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = q.cpu_times()
            total += t.user + t.system
    return total


class Server:
    """``python -m app.cli serve`` (or, ``as_run``, ``python -m app.cli run``: the API
    processes and the worker ``make run`` starts) of one tree on a free port, with that
    tree's code; ``workers`` 0: the command's own default."""

    def __init__(self, tree: Path, env: dict[str, str], workers: int, log: Path,
                 as_run: bool = False) -> None:
        from tests.fixtures.stack import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-m", "app.cli", "run" if as_run else "serve",
               "--host", "127.0.0.1", "--port", str(self.port)]
        if workers:
            cmd += ["--workers", str(workers)]
        self.proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.workers = workers

    def wait_live(self, timeout: float = 120.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("API exited early (see its log)")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/livez", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise RuntimeError("API not live in time")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # our own session only
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


def run_wrk(url: str, key: str, body: Path, connections: int, seconds: float,
            threads: int, server_pid: int, path: str = "/predict") -> dict[str, Any]:
    """One wrk run; its CPU seconds from wait4, the server tree's from psutil."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
    lua = body.with_suffix(".lua")
    lua.write_text(WRK_LUA)
    env = {**os.environ, "BENCH_KEY": key, "BENCH_BODY": str(body)}
    cmd = ["wrk", "-t", str(min(threads, connections)), "-c", str(connections),
           "-d", f"{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(lua), url + path]
    cpu0 = cpu_of_tree(server_pid)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    server_cpu = cpu_of_tree(server_pid) - cpu0
    m = re.search(r"WRKJSON (\{.*\})", out)
    if proc.returncode != 0 or m is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{out}")
    r = json.loads(m.group(1))
    secs = r["duration_us"] / 1e6
    errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
    return {"connections": connections, "requests": r["requests"],
            "requests_per_s": r["requests"] / secs, "p50_ms": r["p50_us"] / 1e3,
            "p90_ms": r["p90_us"] / 1e3, "p99_ms": r["p99_us"] / 1e3,
            "max_ms": r["max_us"] / 1e3, "errors": errors,
            "non_2xx": r["status"], "wrk_cpu_s": ru.ru_utime + ru.ru_stime,
            "server_cpu_s": server_cpu, "seconds": secs}


def boost(pids: list[int], nice: int) -> None:
    """Run ``pids`` at CPU priority ``nice`` (negative: ahead of other work), and their
    sessions' autogroups too: with ``kernel.sched_autogroup_enabled`` a process's nice value
    counts only inside its session, and the CPU is shared between sessions first."""
    if not nice:
        return
    for pid in pids:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, nice)
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def tree_pids(pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(pid)
        return [pid, *(c.pid for c in p.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def wait_idle(pid: int, timeout: float = 120.0) -> None:
    """Wait until the API's process tree uses under 5 % of a core over half a second."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c0 = cpu_of_tree(pid)
        time.sleep(0.5)
        if cpu_of_tree(pid) - c0 < 0.025:
            return


def loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def bench_tree(name: str, tree: Path, workers: int, args: argparse.Namespace, est: Any,
               bodies: dict[str, Path], X_big: np.ndarray, workdir: Path) -> dict[str, Any]:
    data_dir = workdir / f"data-{name}"
    data_dir.mkdir(parents=True, exist_ok=True)
    stack: dict[str, str] = {}
    if args.as_run:  # make run's embedded stack: SQLite and kombu's SQLAlchemy broker
        url, drop = f"sqlite:///{(data_dir / 'sodm.db').resolve()}", (lambda: None)
    else:
        url, drop = create_database()
        stack = {"DATABASE_URL": url, "CELERY_BROKER_URL": f"{REDIS_URL}/{random.randint(1, 15)}"}
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "DATABASE_URL", "CELERY_BROKER_URL", "SODM_REDIS_URL")}
    env.update({**stack, "SODM_DATA_DIR": str(data_dir),
                "SODM_CELERY_QUEUE": f"sodm-bench-{uuid.uuid4().hex[:10]}",
                # the one change to what the command starts: a rate limit one key can pass
                "SODM_RATE_LIMIT_PER_MINUTE": "100000000", "PYTHONPATH": str(tree),
                **dict(kv.split("=", 1) for t, kv in (e.split(":", 1) for e in args.env)
                       if t == name)})
    out = subprocess.run([sys.executable, "-c", REGISTER, url, str(data_dir),
                          str(MODEL_FILE), str(est._svz.shape[0])], cwd=tree, env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        drop()
        raise RuntimeError(f"registering the model in {tree} failed:\n{out.stderr}")
    reg = json.loads(out.stdout.strip().splitlines()[-1])
    server = Server(tree, env, workers, workdir / f"api-{name}.log", as_run=args.as_run)
    if not workers:  # the command's default: one per core (app.core.cores)
        from app.core.cores import default_api_workers

        workers = default_api_workers()
    res: dict[str, Any] = {"tree": os.path.relpath(tree, REPO), "workers": workers,
                           "command": "run" if args.as_run else "serve",
                           "load_before": loadavg()}
    profiles: dict[str, Any] = {}
    try:
        server.wait_live()
        boost(tree_pids(server.proc.pid), args.nice)
        import httpx

        # warm: the model loads into every worker's cache, compiled code runs once. New
        # connections, several at once: one keep-alive connection reaches one worker only,
        # and a cold worker's first request (the model load) would fall in a measured block
        body = bodies["single"].read_bytes().replace(b"MODEL_ID", reg["model_id"].encode())

        def warm(_: int) -> None:
            with httpx.Client(base_url=server.url, timeout=60,
                              headers={"Authorization": f"Bearer {reg['key']}",
                                       "Connection": "close"}) as c:
                for _ in range(8):
                    c.post("/predict", content=body,
                           headers={"Content-Type": "application/json"}).raise_for_status()

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2 * workers) as pool:
            list(pool.map(warm, range(4 * workers)))
        for key in bodies:
            text = bodies[key].read_text().replace("MODEL_ID", reg["model_id"])
            bodies[key].with_name(f"{name}-{key}.json").write_text(text)
        runs = []
        scenarios = [(k, int(c)) for k, c in (x.rsplit("-", 1) for x in args.scenarios)]
        for kind, conns in scenarios:
            body = bodies[kind].with_name(f"{name}-{kind}.json")
            # warm up with one connection, then wait until the API is idle again (a
            # 50-connection warm-up would leave a backlog of large requests behind)
            path = V2_PATH if kind.startswith("v2") else "/predict"
            run_wrk(server.url, reg["key"], body, 1, 2, 1, server.proc.pid, path)
            wait_idle(server.proc.pid)
            spy = None
            if args.profile:
                from bench.serving_profile import start_py_spy

                spy = start_py_spy(server.proc.pid, args.seconds,
                                   workdir / f"{name}-{kind}-{conns}.raw", workers > 1)
            r = run_wrk(server.url, reg["key"], body, conns, args.seconds, args.wrk_threads,
                        server.proc.pid, path)
            rows = 1 if kind in ("single", "v2single") else len(X_big)
            r.update(kind=kind, rows_per_request=rows,
                     predictions_per_s=r["requests_per_s"] * rows)
            if spy is not None:
                from bench.serving_profile import summarize

                spy.wait(timeout=args.seconds + 60)
                profiles[f"{kind}-{conns}"] = summarize(
                    workdir / f"{name}-{kind}-{conns}.raw", r["requests"])
            runs.append(r)
            if kind in ("batch", "v2batch"):
                r["numpy_reference"] = numpy_reference(est, X_big)
                r["ratio_to_numpy"] = r["predictions_per_s"] / r["numpy_reference"][
                    "rows_per_s"]
        res["runs"] = runs
        if profiles:
            res["profiles"] = profiles
    finally:
        server.stop()
        drop()
    res["load_after"] = loadavg()
    return res


def markdown(results: dict[str, Any]) -> str:
    names = list(results["trees"])
    head = "| scenario | " + " | ".join(names) + " |"
    lines = [head, "|---" * (len(names) + 1) + "|"]

    def cell(tree: dict[str, Any], i: int) -> str:
        r = tree["runs"][i]
        s = (f"{r['predictions_per_s']:,.0f} pred/s, p99 {r['p99_ms']:.0f} ms, "
             f"{r['errors']} errors, wrk {r['wrk_cpu_s']:.1f} / API {r['server_cpu_s']:.1f} "
             "CPU s")
        if "ratio_to_numpy" in r:
            s += (f"; numpy {r['numpy_reference']['rows_per_s']:,.0f} rows/s, "
                  f"ratio {r['ratio_to_numpy']:.2f}")
        return s

    first = results["trees"][names[0]]
    for i, r in enumerate(first["runs"]):  # every tree runs the same scenarios
        label = f"{r['kind']}, {r['rows_per_request']} row(s), {r['connections']} conn"
        lines.append(f"| {label} | " + " | ".join(cell(results["trees"][n], i)
                                                   for n in names) + " |")
    lines.append("| load average before / after | " + " | ".join(
        f"{results['trees'][n]['load_before']} / {results['trees'][n]['load_after']}"
        for n in names) + " |")
    for n in names:
        for scen, prof in results["trees"][n].get("profiles", {}).items():
            from bench.serving_profile import table

            lines += ["", f"Profile of {n}, {scen} ({prof['requests']} requests):", "",
                      table(prof)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[],
                    help="NAME=DIR of a service checkout (repeatable; default after=.)")
    ap.add_argument("--workers", default=None,
                    help="API processes, one value or NAME=N,NAME=N per tree (default: 1 "
                         "with serve, the command's own default with --as-run)")
    ap.add_argument("--nice", type=int, default=0,
                    help="on a shared machine: run the API, its worker, wrk and this "
                         "process at this CPU priority (e.g. -15; root), recorded with the "
                         "results")
    ap.add_argument("--as-run", action="store_true",
                    help="start each tree as make run does (python -m app.cli run: SQLite, "
                         "the SQLAlchemy broker, a worker, the default API processes) "
                         "instead of serve on Postgres and Redis")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--batch-rows", type=int, default=1000)
    ap.add_argument("--profile", action="store_true", help="py-spy the API during each run")
    ap.add_argument("--offline", action="store_true",
                    help="also batch decision values in-process vs scikit-learn/onnxruntime")
    ap.add_argument("--out", type=Path, help="write the JSON document here too")
    ap.add_argument("--keep", type=Path, help="keep logs, bodies and raw profiles here")
    ap.add_argument("--no-serve", action="store_true",
                    help="no API and no wrk: only what --offline measures")
    ap.add_argument("--env", action="append", default=[],
                    help="NAME:VAR=VALUE, an environment variable for one tree's API")
    ap.add_argument("--scenarios", nargs="+", default=["single-1", "single-50", "batch-50"],
                    help="KIND-CONNECTIONS with KIND single (one row) or batch on /predict, "
                         "v2single or v2batch on the Open Inference Protocol's infer route")
    args = ap.parse_args(argv)
    boost([os.getpid()], args.nice)  # wrk is started from here
    trees = [] if args.no_serve else [t.split("=", 1) for t in (args.tree or ["after=."])]
    given = args.workers or ("0" if args.as_run else "1")
    workers = {n: int(given) for n, _ in trees} if "=" not in given else {
        k: int(v) for k, v in (p.split("=") for p in given.split(","))}

    from solver.io.model_io import load_model

    est = load_model(ensure_model())
    X_big = test_rows(args.batch_rows)
    with tempfile.TemporaryDirectory(prefix="sodm-bench-serving-") as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        bodies = {k: workdir / f"{k}.json" for k in ("single", "batch", "v2single", "v2batch")}
        bodies["single"].write_text(json.dumps({"model_id": "MODEL_ID",
                                                "instances": X_big[:1].tolist()}))
        bodies["batch"].write_text(json.dumps({"model_id": "MODEL_ID",
                                               "instances": X_big.tolist()}))
        for key, X in (("v2single", X_big[:1]), ("v2batch", X_big)):
            bodies[key].write_text(json.dumps({"inputs": [
                {"name": "X", "shape": list(X.shape), "datatype": "FP64",
                 "data": X.tolist()}]}))
        results: dict[str, Any] = {
            "command": "python -m bench.serving " + " ".join(argv or sys.argv[1:]),
            "model": {"file": MODEL_FILE.name, "n_support_vectors": int(est._svz.shape[0]),
                      "n_features": N_FEATURES, "gamma": float(est.gamma_)},
            "machine": {"cpus": os.cpu_count(), "load_start": loadavg(),
                        "nice": args.nice},
            "trees": {}}
        for name, path in trees:
            results["trees"][name] = bench_tree(name, Path(path).resolve(),
                                                workers.get(name, 1), args, est, bodies,
                                                X_big, workdir)
        if args.offline:
            results["offline_batch"] = offline_batch(est, test_rows(10_000))
        results["machine"]["load_end"] = loadavg()
    text = json.dumps(results, indent=1)
    print(text)
    if results["trees"]:
        print(markdown(results))
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
