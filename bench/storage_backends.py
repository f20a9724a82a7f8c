"""Datasets in a local directory against an S3 bucket, in one command.

For each dataset, written once in the storage contract's form (``storage.write_dataset_files``)
and then put in each store:

* ``put``: the files into the store (``storage.publish_dir``: a rename locally, an upload to
  the bucket);
* ``load``: ``storage.load_dataset`` (what a local training job reads), median of
  ``--repeats``; ``read``: the Parquet read alone through the store's filesystem, and for the
  local store also by path (how the code read it before the store interface: the interface
  must cost nothing there);
* ``spark count``: a classic ``local[2]`` session counting the dataset's rows through
  ``solver.spark.data.load_frame`` (the local store: Spark's own Parquet reader; the bucket:
  each executor reading its row groups with pyarrow), median of ``--repeats``;
* ``spark fit``: ``solver.spark.fit_spark`` (SODM, rbf, fixed parameters) on each store,
  with the decision values of the two models compared.

The bucket is a moto S3 server started here on 127.0.0.1 (a Python server: a real S3 or
MinIO answers faster, so the bucket's numbers are an upper bound on its cost).

    .venv/bin/python -m bench.storage_backends --datasets cod-rna ijcnn1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FIT = {"kernel": "rbf", "gamma": 1.0, "lam": 100.0, "theta": 0.3, "levels": 2, "n_strata": 8}


def median_seconds(f: Any, repeats: int) -> float:
    """The median wall seconds of ``repeats`` calls of ``f()``."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


@contextlib.contextmanager
def moto_server() -> Any:
    sys.path.insert(0, str(REPO))
    import httpx

    from tests.fixtures.services import free_port

    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H",
                             "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{port}", timeout=2)
                break
            if time.monotonic() > deadline:
                raise RuntimeError("moto did not start")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["cod-rna", "ijcnn1"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: ours
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    from app.services.filestore import object_store, storage
    from bench.data import load_split
    from solver.spark import fit_spark
    from solver.spark.data import load_frame

    work = Path(tempfile.mkdtemp(prefix="sodm-storage-bench-"))
    results: dict[str, Any] = {"loadavg_before": list(os.getloadavg()), "datasets": {}}
    spark = (SparkSession.builder.master("local[2]").appName("storage-bench")
             .config("spark.ui.enabled", "false").getOrCreate())
    try:
        with moto_server() as port:
            url = (f"s3://bench/data?endpoint_override=127.0.0.1:{port}&scheme=http"
                   "&allow_bucket_creation=true")
            stores = {"local": object_store.open_store(None, work / "store"),
                      "s3": object_store.open_store(url, work)}
            object_store.ensure(stores["s3"])
            for name in args.datasets:
                split = load_split(name)
                X, y = split.X_train, split.y_train
                row: dict[str, Any] = {"rows": int(X.shape[0]), "features": int(X.shape[1])}
                models = {}
                for kind, store in stores.items():
                    src = work / f"{name}-{kind}"
                    src.mkdir()
                    storage.write_dataset_files(src, X, y, row_group_size=8192)
                    where = store.at(f"datasets/{name}")
                    t0 = time.perf_counter()
                    storage.publish_dir(src, where)
                    row[f"{kind}_put_s"] = time.perf_counter() - t0
                    row[f"{kind}_load_s"] = median_seconds(
                        lambda w=where: storage.load_dataset(w), args.repeats)
                    data = where / storage.DATA_FILE
                    row[f"{kind}_read_s"] = median_seconds(
                        lambda d=data: pq.read_table(d.path, filesystem=d.fs), args.repeats)
                    if kind == "local":
                        row["local_by_path_read_s"] = median_seconds(
                            lambda d=data: pq.read_table(d.local_path), args.repeats)
                    row[f"{kind}_spark_count_s"] = median_seconds(
                        lambda w=where: load_frame(spark, w.uri)[0].count(), args.repeats)
                    t0 = time.perf_counter()
                    models[kind] = fit_spark(spark, where.uri, FIT, seed=0)
                    row[f"{kind}_spark_fit_s"] = time.perf_counter() - t0
                F = {k: m.decision_function(X[:2000]) for k, m in models.items()}
                row["max_abs_decision_diff"] = float(np.max(np.abs(F["s3"] - F["local"])))
                for what in ("load", "spark_count", "spark_fit"):
                    row[f"{what}_s3_over_local"] = row[f"s3_{what}_s"] / row[f"local_{what}_s"]
                row["read_interface_over_by_path"] = (row["local_read_s"]
                                                      / row["local_by_path_read_s"])
                results["datasets"][name] = row
                print(json.dumps({name: row}, indent=1), flush=True)
    finally:
        spark.stop()
    results["loadavg_after"] = list(os.getloadavg())
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
