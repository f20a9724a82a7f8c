"""Grid search with k-fold CV: the Spark backend's fold step against the local one.

Runs ``worker.training.search.grid_search`` twice on the same rows, folds and grid: with
``local_fit_score`` (fits in this process) and with ``spark_fit_score`` (each fold's fit is
Spark jobs on a classic ``local[cores]`` session, the validation rows scored here), and
prints wall and CPU seconds of each (``bench.proc_meter``, the whole process tree), their
ratio, and whether the fold accuracies and the chosen point are equal. Example:

    nice -n 10 .venv/bin/python bench/spark_search.py --dataset heart_scale --folds 3 \\
        --lam 10 1000 --cores 2
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
DATASETS = REPO.parent / "shared" / "datasets"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="heart_scale")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--lam", nargs="+", type=float, default=[10.0, 1000.0])
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # as Spark's Python workers run BLAS
    import lzma

    from sklearn.datasets import load_svmlight_file

    from app.core.config import Settings
    from app.services.filestore.storage import write_dataset_files
    from bench.proc_meter import TreeMeter
    from solver import SODMClassifier
    from worker.spark.spark_backend import SparkJob
    from worker.training.search import grid_search, local_fit_score, spark_fit_score

    with lzma.open(DATASETS / f"{args.dataset}.xz", "rb") as fh:
        X, y = load_svmlight_file(fh)
    X = np.asarray(X.toarray(), dtype=np.float64)
    params = {"kernel": "rbf", "gamma": 0.5, "levels": 1, "n_strata": 4}
    grid = {"lam": args.lam}

    def never() -> bool:
        return False

    def quiet(fraction: float, message: str) -> None:
        return None

    est = SODMClassifier(**params, random_state=args.seed)
    with TreeMeter() as m_local:
        local = grid_search(y, grid, args.folds, args.seed,
                            local_fit_score(est, X, y, never), quiet, never)
    settings = Settings(SODM_SPARK_MASTER=f"local[{args.cores}]")
    with tempfile.TemporaryDirectory() as tmp:
        ddir = Path(tmp) / args.dataset
        ddir.mkdir()
        write_dataset_files(ddir, X, y)
        t0 = time.perf_counter()
        with SparkJob(ddir, "bench-search", settings=settings) as job:
            t_session = time.perf_counter() - t0
            with TreeMeter() as m_spark:
                spark = grid_search(y, grid, args.folds, args.seed,
                                    spark_fit_score(job, params, args.seed, None, y), quiet,
                                    never)
    fits = len(args.lam) * args.folds
    print(json.dumps({
        "dataset": args.dataset, "rows": int(len(y)), "folds": args.folds, "fits": fits,
        "cores": args.cores, "session_seconds": round(t_session, 1),
        "local_seconds": round(m_local.wall_seconds, 2),
        "spark_seconds": round(m_spark.wall_seconds, 2),
        "wall_ratio": round(m_spark.wall_seconds / max(m_local.wall_seconds, 1e-9), 1),
        "local_cpu_seconds": round(m_local.cpu_seconds, 1),
        "spark_cpu_seconds": round(m_spark.cpu_seconds, 1),
        "cpu_ratio": round(m_spark.cpu_seconds / max(m_local.cpu_seconds, 1e-9), 1),
        "same_fold_accuracies": [r["fold_accuracy"] for r in local["results"]]
        == [r["fold_accuracy"] for r in spark["results"]],
        "same_best": local["best_params"] == spark["best_params"],
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }, indent=1))


if __name__ == "__main__":
    main()
