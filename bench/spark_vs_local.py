"""Spark backend versus local backend: SODM (RBF) on cod-rna and ijcnn1 with 1 and 2 cores.

For every dataset: the training file is written in the service's storage layout (Parquet +
meta.json), the local backend fits ``SODMClassifier`` with ``n_jobs = cores`` (after one
small warm-up fit in this process, which loads the compiled loops) and the Spark backend
trains through ``worker.spark.spark_backend.train_on_spark`` on a fresh classic ``local[cores]``
session, twice: the *first* fit after the session starts (it also starts Spark's Python
workers, imports the solver in them and warms the JVM: one-time costs of a worker process)
and a *second*, warm fit, which is what every later job of a running service pays; the
session start-up itself is timed separately.  Reported: training seconds, test accuracy on
the official test file, the overhead ratio spark / local at the same core count for the warm
and the first fit, and the maximum relative difference of the decision values on the test
set.

    .venv/bin/python bench/spark_vs_local.py [--datasets cod-rna ijcnn1] [--cores 1 2]
        [--max-rows N] [--n-strata S] [--out results.json]

A script, not a test; it needs Java 17 and pyspark (the ``spark`` extra).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATASETS = REPO.parent / "shared" / "datasets"
N_FEATURES = {"cod-rna": 8, "ijcnn1": 22, "svmguide1": 4}


def load(name: str, split: str = "") -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_svmlight_file

    with lzma.open(DATASETS / f"{name}{split}.xz", "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=N_FEATURES[name])
    return np.asarray(X.toarray(), dtype=np.float64), np.asarray(y).astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["cod-rna", "ijcnn1"])
    ap.add_argument("--cores", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--max-rows", type=int, default=None, help="training subsample")
    ap.add_argument("--n-strata", type=int, default=None)
    ap.add_argument("--levels", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    from app.core.config import Settings
    from bench.proc_meter import TreeMeter
    from bench.spark_methods import write_dataset
    from solver import SODMClassifier
    from worker.spark.spark_backend import spark_session, stop_classic_session, train_on_spark

    params = {"kernel": "rbf", "lam": 1000.0}
    if args.n_strata is not None:
        params["n_strata"] = args.n_strata
    if args.levels is not None:
        params["levels"] = args.levels
    results = []
    warm_x, warm_y = load("svmguide1")
    SODMClassifier(**params, n_jobs=max(args.cores), random_state=args.seed).fit(
        warm_x[::2], warm_y[::2])  # compiled loops loaded, as in a running worker
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            X, y = load(name)
            Xt, yt = load(name, ".t")
            if args.max_rows and args.max_rows < len(y):
                idx = np.random.default_rng(args.seed).choice(len(y), args.max_rows,
                                                              replace=False)
                X, y = X[np.sort(idx)], y[np.sort(idx)]
            ddir = write_dataset(Path(tmp) / name, X, y)
            for cores in args.cores:
                t0 = time.perf_counter()
                with TreeMeter() as m_local:
                    local = SODMClassifier(**params, n_jobs=cores,
                                           random_state=args.seed).fit(X, y)
                t_local = time.perf_counter() - t0
                acc_local = float(local.score(Xt, yt))
                settings = Settings(SODM_SPARK_MASTER=f"local[{cores}]")
                stop_classic_session()
                t0 = time.perf_counter()
                with spark_session(settings, job_id="bench-warmup") as spark:
                    spark.range(1).count()
                t_session = time.perf_counter() - t0
                t0 = time.perf_counter()
                train_on_spark(ddir, params, args.seed, None, None,
                               f"bench-{name}-{cores}-first", settings=settings)
                t_first = time.perf_counter() - t0
                t0 = time.perf_counter()
                with TreeMeter() as m_spark:
                    est = train_on_spark(ddir, params, args.seed, None, None,
                                         f"bench-{name}-{cores}", settings=settings)
                t_spark = time.perf_counter() - t0
                acc_spark = float(est.score(Xt, yt))
                f_l, f_s = local.decision_function(Xt), est.decision_function(Xt)
                row = {
                    "dataset": name, "n_train": int(len(y)), "n_test": int(len(yt)),
                    "cores": cores, "local_seconds": round(t_local, 2),
                    "spark_seconds": round(t_spark, 2),
                    "spark_session_seconds": round(t_session, 2),
                    "spark_first_fit_seconds": round(t_first, 2),
                    "overhead_ratio": round(t_spark / t_local, 2),
                    "first_fit_ratio": round(t_first / t_local, 2),
                    "local_cpu_seconds": round(m_local.cpu_seconds, 1),
                    "spark_cpu_seconds": round(m_spark.cpu_seconds, 1),
                    "cpu_ratio": round(m_spark.cpu_seconds / max(m_local.cpu_seconds, 1e-9),
                                       2),
                    "load_avg_1m": round(os.getloadavg()[0], 1),
                    "spark_peak_rss_gib": round(m_spark.peak_rss / 2**30, 2),
                    "local_accuracy": round(acc_local, 4), "spark_accuracy": round(acc_spark, 4),
                    "max_rel_decision_diff": float(np.max(np.abs(f_l - f_s))
                                                   / np.max(np.abs(f_l))),
                    "levels": int(local.history_[0]["level"]) if local.history_ else 0,
                }
                results.append(row)
                print(json.dumps(row), flush=True)
    stop_classic_session()
    print("\n| dataset | n_train | cores | local s | Spark s (warm) | ratio | Spark s (first "
          "fit) | ratio | acc local | acc Spark |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['dataset']} | {r['n_train']} | {r['cores']} | {r['local_seconds']} | "
              f"{r['spark_seconds']} | {r['overhead_ratio']} | {r['spark_first_fit_seconds']} "
              f"| {r['first_fit_ratio']} | {r['local_accuracy']} | {r['spark_accuracy']} |")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
