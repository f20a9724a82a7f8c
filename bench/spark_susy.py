"""SODM on Spark over a generated SUSY-shaped set (1,000,000 x 18, two classes), within a
stated memory budget.

The generator (``generate``) is seeded and chunked (chunk ``c`` draws from
``SeedSequence([seed, c])``), so a given ``--rows`` always gives the same rows whatever the
machine. Shape as SUSY: 8 "low-level" features (Gaussian, class-dependent scale and shift)
and 10 "high-level" ones (noisy nonlinear functions of the low-level ones), 46 % positives.
The training set is written once in the service's storage layout (Parquet, row groups of
65,536 rows, + ``meta.json``) and read by Spark by path; a separate test set (other seed)
gives the accuracy.

Spark runs in classic ``local[cores]`` mode through ``worker.spark.spark_backend.train_on_spark``
with the driver JVM heap capped by ``--driver-memory``; ``bench.proc_meter.TreeMeter``
records the peak RSS and the CPU seconds of this process plus every child (JVM, Python
workers): the memory actually used and the work done.

    nice .venv/bin/python bench/spark_susy.py --algo linear --out linear.json
    nice .venv/bin/python bench/spark_susy.py --algo rbf --max-rows 100000 --p 8 --levels 2 \\
        --out rbf.json
    nice .venv/bin/python bench/spark_susy.py --algo rbf --cache-size 1024 --test-rows 20000 \\
        --out rbf-full.json   # all 1M rows: default p (62 partitions of <= 16,130 rows)

With ``--algo linear`` the peer, Spark MLlib's ``LinearSVC`` (OWL-QN on the hinge loss,
``regParam`` = ``--mllib-reg``, ``maxIter`` = ``--mllib-iter``), is trained afterwards on the
same session and the same Parquet file (a ``VectorAssembler`` over ``f0..f17``); its time,
accuracy on the same test set and the ratio SODM / MLlib are added to the output.
``--no-mllib`` skips it.

A script, not a test; it needs Java 17 and pyspark (the ``spark`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CHUNK = 100_000
N_FEATURES = 18


def generate(n_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_rows`` SUSY-shaped rows (float64, 18 columns) and labels in {0, 1}."""
    X = np.empty((n_rows, N_FEATURES))
    y = np.empty(n_rows, dtype=np.int64)
    for c, start in enumerate(range(0, n_rows, CHUNK)):
        n = min(CHUNK, n_rows - start)
        rng = np.random.default_rng(np.random.SeedSequence([seed, c]))
        lab = (rng.random(n) < 0.46).astype(np.int64)
        low = rng.standard_normal((n, 8))
        pos = lab == 1
        low[pos, :4] *= 1.35
        low[pos, 4:] += 0.35
        high = np.column_stack([
            np.abs(low[:, 0] * low[:, 1]), low[:, 2] ** 2 + low[:, 3] ** 2,
            np.sin(low[:, 4]) + 0.5 * low[:, 5], np.hypot(low[:, 6], low[:, 7]),
            low[:, 0] + low[:, 4], np.maximum(low[:, 1], low[:, 5]),
            np.tanh(low[:, 2] * low[:, 6]), low[:, :4].sum(axis=1) / 2,
            np.abs(low[:, 4:]).mean(axis=1), low[:, 3] - low[:, 7],
        ]) + 0.5 * rng.standard_normal((n, 10))
        X[start:start + n, :8] = low
        X[start:start + n, 8:] = high
        y[start:start + n] = lab
    return X, y


def mllib_peer(spark, ddir: Path, Xt: np.ndarray, yt: np.ndarray, reg: float,
               max_iter: int) -> dict:
    """Spark MLlib ``LinearSVC`` on the stored Parquet; test accuracy from its coefficients."""
    from bench.spark_methods import mllib_linearsvc

    t0 = time.perf_counter()
    w, b = mllib_linearsvc(spark, ddir / "data.parquet", N_FEATURES, reg, max_iter,
                           standardization=True)
    seconds = time.perf_counter() - t0
    pred = (Xt @ w + b > 0).astype(np.int64)
    return {"mllib_params": {"regParam": reg, "maxIter": max_iter, "standardization": True},
            "mllib_seconds": round(seconds, 1),
            "mllib_accuracy": round(float(np.mean(pred == yt)), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--algo", choices=["linear", "rbf"], required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--max-rows", type=int, default=None,
                    help="train on the first N generated rows (row cap, RBF)")
    ap.add_argument("--test-rows", type=int, default=100_000)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--driver-memory", default="2g", help="driver JVM heap (-Xmx)")
    ap.add_argument("--p", type=int, default=None,
                    help="merge fan-in "
                         "(default: solver.sodm.hierarchy.default_p from --cache-size)")
    ap.add_argument("--levels", type=int, default=None)
    ap.add_argument("--cache-size", type=float, default=512.0, help="MB per local solve")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-mllib", action="store_true", help="skip the MLlib LinearSVC peer")
    ap.add_argument("--mllib-reg", type=float, default=1e-4, help="LinearSVC regParam")
    ap.add_argument("--mllib-iter", type=int, default=100, help="LinearSVC maxIter")
    args = ap.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    from app.core.config import Settings
    from bench.proc_meter import TreeMeter
    from bench.spark_methods import write_dataset
    from worker.spark.spark_backend import spark_session, stop_classic_session, train_on_spark

    if args.algo == "linear":
        params: dict = {"kernel": "linear", "lam": 100.0}
        if args.epochs is not None:
            params["epochs"] = args.epochs
    else:
        params = {"kernel": "rbf", "lam": 1000.0, "cache_size": args.cache_size}
        for name in ("p", "levels"):
            if getattr(args, name) is not None:
                params[name] = getattr(args, name)
    n_train = min(args.rows, args.max_rows or args.rows)
    t0 = time.perf_counter()
    X, y = generate(args.rows, args.seed)
    X, y = X[:n_train], y[:n_train]
    Xt, yt = generate(args.test_rows, args.seed + 1)
    t_gen = time.perf_counter() - t0
    settings = Settings(SODM_SPARK_MASTER=f"local[{args.cores}]")
    history: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        ddir = write_dataset(Path(tmp) / "susy", X, y, row_group_size=65_536)
        del X
        size_mb = (ddir / "data.parquet").stat().st_size / 2**20
        with TreeMeter() as mem:
            t0 = time.perf_counter()
            with spark_session(settings, job_id="bench-warmup") as spark:
                spark.range(1).count()
            t_session = time.perf_counter() - t0
            t0 = time.perf_counter()
            est = train_on_spark(ddir, params, args.seed,
                                 lambda f, m, r: (history.append(r), print(m, flush=True)),
                                 None, f"bench-susy-{args.algo}", settings=settings)
            t_train = time.perf_counter() - t0
        peer = None
        if args.algo == "linear" and not args.no_mllib:
            with spark_session(settings, job_id="bench-mllib") as spark:
                peer = mllib_peer(spark, ddir, Xt, yt, args.mllib_reg, args.mllib_iter)
            print(f"MLlib LinearSVC: {peer['mllib_seconds']} s, accuracy "
                  f"{peer['mllib_accuracy']}", flush=True)
        stop_classic_session()
    row = {
        "dataset": "susy-like (generated)", "algo": f"SODM-{args.algo}", "rows_generated":
        args.rows, "n_train": int(n_train), "n_test": int(len(yt)), "cores": args.cores,
        "params": params, "parquet_mb": round(size_mb, 1),
        "driver_memory": args.driver_memory, "peak_rss_gib": round(mem.peak_rss / 2**30, 2),
        "cpu_seconds": round(mem.cpu_seconds, 1),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "generate_seconds": round(t_gen, 1), "spark_session_seconds": round(t_session, 1),
        "spark_seconds": round(t_train, 1), "accuracy": round(float(est.score(Xt, yt)), 4),
        "n_support": int(np.sum(est.n_support_)),
        "levels_or_epochs": [r.get("level", r.get("epoch")) for r in history],
        "level_seconds": [round(float(r.get("seconds", 0.0)), 1) for r in history],
    }
    if peer is not None:
        row.update(peer)
        row["ratio_sodm_to_mllib"] = round(t_train / peer["mllib_seconds"], 2)
    print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
