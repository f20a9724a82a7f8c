"""The benchmark suite: SODM against the methods a user would pick instead, in one command.

    .venv/bin/python -m bench.run [--quick] [--datasets NAME ...] [--methods NAME ...]
        [--repeats N] [--cpu-cap S] [--mem-gib G] [--out docs/benchmarks.json]
        [--doc docs/benchmarks.md] [--no-scaling] [--scaling-max-rows N]

One run of this command is one published document (``docs/benchmarks.md`` and its JSON): no
rows are merged from other runs.  For every dataset (``bench.data.load_split``: official test
file or stratified 80/20 seed 0, ``cod-rna.t`` / ``ijcnn1.t`` with the official split
reversed; min-max fitted on the training split):

1. hyperparameters per family by 3-fold CV on the same stratified subsample of at most
   ``--cv-rows`` training rows, ``GRID_POINTS`` grid points for every family
   (``bench.methods``), one child process per family, on one core;
2. every method fitted on the whole training split in its own child process
   (``bench.child``) with a CPU-time cap per process (``--cpu-cap``: a capped fit is
   reported as "> cap", not dropped; a wall-clock cap of ``--wall-factor`` times it is the
   backstop) and an address-space cap (``--mem-gib``: reported as "out of memory at N
   GiB"): first on **one core** (pinned to one CPU, BLAS one thread, ``n_jobs=1``: the
   equal-cores comparison with LIBSVM / LIBLINEAR), then, for methods with an ``n_jobs``
   knob, on **two cores** with ``n_jobs=2``.  Each fit records wall and CPU seconds of its
   whole process tree, peak RSS, accuracy, #SV, model bytes and prediction seconds.
   The one-core work (CV and one-core fits) runs in two *lanes*, one per CPU, datasets
   largest first; the two-core fits run afterwards, one at a time;
3. the per-level curves of the SODM hierarchy on the larger tasks, from
   ``bench.hierarchy.level_curves`` (the SODM hierarchy study, its own module) where that
   module exists (the report says so where it does not);
4. the scaling study on the generated SUSY-shaped set up to 1,000,000 rows (``bench.scaling``)
   and the cost model fitted to it (``bench.cost_model``);
5. the report (``bench.report``).  The JSON file is rewritten after every row, so an
   interrupted run still leaves everything that finished.

``--quick`` (CI): svmguide1 and phishing subsampled to 1,500 training rows, 1 repeat, a
two-point grid per family on 600 rows, the Spark row on svmguide1 on one core only (each
Spark config starts its own JVM: about 20 s), a tiny scaling study.

The interface ``bench.hierarchy`` provides (called once per dataset of ``HIERARCHY_DATASETS``)::

    level_curves(name: str, data: Path, params: dict, *, quick: bool, timeout: float,
                 mem_gib: float) -> list[dict]

``data`` is an ``.npz`` with ``X_train, y_train, X_test, y_test`` (the split above),
``params`` the tuned ``odm-rbf`` hyperparameters (``lam, gamma_mult, theta, upsilon``; RBF
gamma = gamma_mult / n_features); each returned dict is one row of the per-level table
(for example ``variant, level, partitions, partition_size, accuracy, cpu_s, wall_s``), shown
as it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.blas import blas_kernels
from bench.child import run_task
from bench.cpu import cpu_record
from bench.data import load_split
from bench.lanes import in_lanes
from bench.methods import (
    CACHE_MB,
    FAMILY_REFERENCE,
    GRID_POINTS,
    GRIDS,
    METHODS,
    QUICK_GRIDS,
    expand,
)
from bench.report import docs_relative

REPO = Path(__file__).resolve().parents[1]
DATASETS = ["svmguide1", "phishing", "a9a", "ijcnn1", "cod-rna", "skin_nonskin", "ijcnn1.t",
            "cod-rna.t"]
LARGE = ("ijcnn1.t", "skin_nonskin", "cod-rna.t")  # the 90k-270k-row tasks of issue 19
HIERARCHY_DATASETS = LARGE
SPARK_DATASETS = ("cod-rna.t",)  # Spark rows: the same model as local, 1 and 2 cores
QUICK_DATASETS = ["svmguide1", "phishing"]
# the lanes take datasets in this order (largest first, so the two lanes end together)
LANE_ORDER = ["cod-rna.t", "skin_nonskin", "ijcnn1.t", "cod-rna", "ijcnn1", "a9a", "phishing",
              "svmguide1"]
BIG_ROWS = 20000  # repeats default to 1 above this many training rows
# Run order (the table keeps METHODS' order): what the targets need first, in case of a cap.
PRIORITY = ["svc", "sodm-rbf", "linearsvc", "odm-linear", "sodm-linear", "nystroem-1000",
            "nystroem-4000", "rff-2000", "odm-svrg", "odm-rbf", "dc-odm", "ca-odm", "dip-odm",
            "sodm-rbf-spark", "sodm-linear-spark", "mllib-linearsvc"]
CORES = (1, 2)  # every method on one core; methods with an n_jobs knob on two as well


def machine() -> dict:
    """nproc, CPU model, RAM and library versions of this machine."""
    import numba
    import psutil
    import sklearn

    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                      if ln.startswith("Model name")), "")
    except OSError:
        pass
    git = ["git", "-C", str(REPO)]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    dirty = bool(subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=False).stdout.strip())
    return {"label": os.environ.get("BENCH_MACHINE_LABEL", "this machine"),
            "commit": commit, "dirty": dirty,
            "nproc": len(os.sched_getaffinity(0)), "cpu_model": model or platform.processor(),
            "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "numpy": np.__version__,
            "scikit_learn": sklearn.__version__, "numba": numba.__version__,
            "cpu": cpu_record(), "blas": blas_kernels(),
            "load_avg_start": list(os.getloadavg())}


def _save_split(split, path: Path) -> None:
    np.savez(path, X_train=split.X_train, y_train=split.y_train, X_test=split.X_test,
             y_test=split.y_test)


def _cv_subsample(split, rows: int, path: Path) -> int:
    from sklearn.model_selection import train_test_split

    X, y = split.X_train, split.y_train
    if len(y) > rows:
        X, _, y, _ = train_test_split(X, y, train_size=rows, stratify=y, random_state=0)
    np.savez(path, X_train=X, y_train=y, X_test=X[:1], y_test=y[:1])
    return len(y)


def tune(name: str, families: list[str], data: Path, grids: dict, args, cpu: int) -> dict:
    """CV per family (one child per family, on CPU ``cpu``); a capped family keeps the grid's
    first point (marked ``fallback``)."""
    out = {}
    for fam in families:
        grid = expand(grids[fam])
        res = run_task({"task": "cv", "method": FAMILY_REFERENCE[fam], "grid": grid,
                        "data": str(data), "cores": 1, "cpus": [cpu],
                        "cpu_cap_s": args.cv_cpu_cap, "mem_gib": args.mem_gib},
                       args.cv_cpu_cap * args.wall_factor)
        if res.get("status") != "ok":
            res = {**res, "best": grid[0], "fallback": True}
        out[fam] = res
        print(f"  cv {name} {fam}: {res.get('best')} "
              f"cv_acc={res.get('best_cv_accuracy', float('nan')):.4f} "
              f"({res.get('wall_s', 0):.1f}s, cpu {res.get('task_cpu_s', 0):.1f}s, "
              f"{res.get('status')})", flush=True)
    return out


SUMMARY_KEYS = ("fit_s", "fit_cpu_s", "predict_s", "predict_s_per_1k", "accuracy",
                "peak_rss_mb", "base_rss_mb", "n_sv", "model_bytes")


def summarize(runs: list[dict]) -> dict:
    """Medians (with min and max) of the ok runs, or the first failure's status."""
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        first = runs[0] if runs else {"status": "skipped"}
        return {k: first[k] for k in ("status", "reason", "mem_gib", "timeout_s", "error")
                if k in first}
    s: dict = {"status": "ok", "repeats": len(ok)}
    for key in SUMMARY_KEYS:
        vals = [r[key] for r in ok if r.get(key) is not None]
        if vals:
            s[key] = float(np.median(vals))
            s[key + "_min"], s[key + "_max"] = float(min(vals)), float(max(vals))
    s["n_train"] = ok[0]["n_train"]
    s["predictions_sha1"] = ok[0].get("predictions_sha1")
    if ok[0].get("history"):
        s["history"] = ok[0]["history"]
    return s


def _fit_config(m: str, params: dict, cores: int, data: Path, repeats: int, args,
                cpu: int | None = None) -> dict:
    method = METHODS[m]
    runs = []
    for rep in range(repeats):
        spec = {"task": "fit", "method": m, "params": params, "seed": rep, "n_jobs": cores,
                "cores": cores, "cpus": None if cpu is None else [cpu],
                "cpu_cap_s": args.cpu_cap, "mem_gib": None if method.spark else args.mem_gib,
                "data": str(data)}
        res = run_task(spec, args.cpu_cap * args.wall_factor)
        runs.append(res)
        print(f"  {m:14s} {cores} core(s) rep {rep}: {res.get('status')} "
              f"fit {res.get('fit_s', 0):8.2f}s cpu {res.get('fit_cpu_s', 0):8.2f}s "
              f"acc {res.get('accuracy', float('nan')):.4f} "
              f"peak {res.get('peak_rss_mb', 0):7.0f} MB sv {res.get('n_sv')}", flush=True)
        if res.get("status") != "ok":
            break  # a cap / error is not retried with another seed
    return {"runs": runs, "summary": summarize(runs)}


def _methods_for(name: str, methods: list[str], args) -> list[str]:
    spark_sets = QUICK_DATASETS[:1] if args.quick else args.spark_datasets
    return [m for m in methods if not METHODS[m].spark or name in spark_sets]


def prepare_dataset(name: str, args, work: Path, results: dict) -> None:
    """Load the split, write it and its CV subsample to ``work``, record the shapes."""
    t0 = time.perf_counter()
    split = load_split(name, max_train=1500 if args.quick else None)
    _save_split(split, work / f"{name}.npz")
    cv_rows = _cv_subsample(split, args.cv_rows, work / f"{name}-cv.npz")
    ds = results["datasets"][name]
    ds.update(n_train=len(split.y_train), n_test=len(split.y_test),
              n_features=split.X_train.shape[1], cv_rows=cv_rows,
              load_s=time.perf_counter() - t0, large=name in LARGE)
    print(f"{name}: train {len(split.y_train)} test {len(split.y_test)} "
          f"d {split.X_train.shape[1]}", flush=True)


def _skipped(reason: str) -> dict:
    """A method config that was not run, and why (the report shows the reason)."""
    return {"runs": [], "summary": {"status": "skipped", "reason": reason}}


def one_core_phase(name: str, methods: list[str], args, work: Path, results: dict, save,
                   cpu: int) -> None:
    """CV of every family, then every method on one core, all pinned to CPU ``cpu``."""
    prepare_dataset(name, args, work, results)
    ds = results["datasets"][name]
    methods = _methods_for(name, methods, args)
    families = sorted({METHODS[m].family for m in methods})
    grids = QUICK_GRIDS if args.quick else GRIDS
    ds["tuning"] = tune(name, families, work / f"{name}-cv.npz", grids, args, cpu)
    save()
    repeats = args.repeats or (3 if ds["n_train"] <= BIG_ROWS else 1)
    ds["repeats"] = repeats
    rows = ds.setdefault("methods", {})
    for m in sorted(methods, key=PRIORITY.index):
        method = METHODS[m]
        row: dict = {"params": ds["tuning"][method.family]["best"], "configs": {}}
        rows[m] = row
        if method.max_train is not None and ds["n_train"] > method.max_train:
            row["configs"]["1"] = _skipped(f"n_train {ds['n_train']:,} > "
                                           f"{method.max_train:,}: the float64 kernel "
                                           "exceeds 2 GB")
            continue
        row["configs"]["1"] = _fit_config(m, row["params"], 1, work / f"{name}.npz", repeats,
                                          args, cpu)
        save()


def two_core_phase(name: str, args, work: Path, results: dict, save) -> None:
    """Methods with an ``n_jobs`` knob on both CPUs with ``n_jobs=2``, then the per-level
    curves of the hierarchy study."""
    ds = results["datasets"][name]
    for m, row in ds.get("methods", {}).items():
        if not METHODS[m].parallel:
            continue
        if args.quick and METHODS[m].spark:
            row["configs"]["2"] = _skipped("--quick: Spark rows on one core only")
            continue
        if row["configs"].get("1", {}).get("summary", {}).get("status") != "ok":
            row["configs"]["2"] = _skipped("the one-core fit did not finish")
            continue
        row["configs"]["2"] = _fit_config(m, row["params"], 2, work / f"{name}.npz",
                                          ds["repeats"], args)
        save()
    if name in HIERARCHY_DATASETS and not args.no_hierarchy:
        ds["hierarchy"] = hierarchy_rows(name, work / f"{name}.npz",
                                         ds["tuning"].get("odm-rbf", {}), args)
        save()


def hierarchy_rows(name: str, data: Path, tuned: dict, args) -> dict:
    """Rows of ``bench.hierarchy.level_curves`` (see the module docstring), or why none."""
    if importlib.util.find_spec("bench.hierarchy") is None:
        return {"status": "not available", "reason": "bench/hierarchy.py (the SODM hierarchy "
                "study) is not in this checkout"}
    from bench import hierarchy

    t0 = time.perf_counter()
    try:
        rows = hierarchy.level_curves(name, data, dict(tuned.get("best", {})), quick=args.quick,
                                      timeout=args.cpu_cap * args.wall_factor,
                                      mem_gib=args.mem_gib)
    except Exception as exc:  # the rest of the run goes on; the report shows the error
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"status": "ok", "rows": list(rows), "seconds": time.perf_counter() - t0}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI mode: small data, tiny grid")
    ap.add_argument("--datasets", nargs="+", choices=DATASETS, default=None)
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), default=None)
    ap.add_argument("--spark-datasets", nargs="*", default=list(SPARK_DATASETS),
                    help="datasets that get the Spark rows (1 and 2 cores)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="fits per method (default 3 below 20k training rows, else 1)")
    ap.add_argument("--cpu-cap", type=float, default=None,
                    help="CPU seconds per process of a fit (900; quick 120)")
    ap.add_argument("--cv-cpu-cap", type=float, default=900.0,
                    help="CPU seconds per family's CV")
    ap.add_argument("--wall-factor", type=float, default=4.0,
                    help="wall-clock cap = this many times the CPU cap (a backstop)")
    ap.add_argument("--lanes", type=int, default=2, help="parallel one-core lanes (CPUs)")
    ap.add_argument("--cv-rows", type=int, default=None, help="CV subsample (5000; quick 600)")
    ap.add_argument("--mem-gib", type=float, default=6.0,
                    help="address-space cap of every local fit process, GiB")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.json")
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--img-dir", type=Path, default=None, help="PNGs (default: doc dir/img)")
    ap.add_argument("--notes", type=Path, default=None,
                    help="hand-written analysis included in the doc (default bench/notes.md)")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling study")
    ap.add_argument("--no-hierarchy", action="store_true", help="skip the per-level curves")
    ap.add_argument("--scaling-max-rows", type=int, default=None)
    ap.add_argument("--scaling-cpu-cap", type=float, default=None,
                    help="CPU seconds per process of a scaling fit (300; quick 60)")
    ap.add_argument("--no-report", action="store_true", help="write the JSON only")
    args = ap.parse_args(argv)
    if args.cv_rows is None:
        args.cv_rows = 600 if args.quick else 5000
    if args.cpu_cap is None:
        args.cpu_cap = 120.0 if args.quick else 900.0
    args.timeout = args.cpu_cap  # the report's name for the per-fit cap
    if args.quick and args.repeats is None:
        args.repeats = 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    datasets = args.datasets or (QUICK_DATASETS if args.quick else DATASETS)
    methods = args.methods or [m for m, meth in METHODS.items() if meth.default]
    command = "python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)
    grids = QUICK_GRIDS if args.quick else GRIDS
    results: dict = {"command": command.strip(), "quick": args.quick, "machine": machine(),
                     "config": {"cache_mb": CACHE_MB, "cores": list(CORES),
                                "timeout_s": args.cpu_cap, "cpu_cap_s": args.cpu_cap,
                                "cv_cpu_cap_s": args.cv_cpu_cap,
                                "wall_factor": args.wall_factor,
                                "cv_rows": args.cv_rows, "cv_folds": 3,
                                "grid_points": {f: len(expand(g)) for f, g in grids.items()},
                                "grid_points_target": 2 if args.quick else GRID_POINTS,
                                "mem_gib": args.mem_gib, "methods": methods,
                                "datasets": datasets, "grids": grids,
                                "spark_datasets": (QUICK_DATASETS[:1] if args.quick
                                                   else args.spark_datasets)},
                     "datasets": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                     "json_name": docs_relative(args.out)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def save() -> None:
        with lock:
            results["machine"]["load_avg_now"] = list(os.getloadavg())
            args.out.write_text(json.dumps(results, indent=1))

    allowed = sorted(os.sched_getaffinity(0))
    lanes = allowed[: max(1, min(args.lanes, len(allowed)))]
    results["config"]["lanes"] = lanes
    for name in datasets:  # the document keeps this order
        results["datasets"][name] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        work = Path(tmp)
        order = sorted(datasets, key=lambda n: LANE_ORDER.index(n))
        in_lanes(order, lanes, lambda name, cpu: one_core_phase(name, methods, args, work,
                                                                 results, save, cpu))
        for name in datasets:
            two_core_phase(name, args, work, results, save)
        if not args.no_scaling:
            from bench.scaling import run_scaling

            results["scaling"] = run_scaling(quick=args.quick, max_rows=args.scaling_max_rows,
                                             cpu_cap=args.scaling_cpu_cap or (
                                                 60.0 if args.quick else 300.0),
                                             wall_factor=args.wall_factor,
                                             mem_gib=args.mem_gib, lanes=lanes, save=save,
                                             results=results)
    results["total_s"] = time.perf_counter() - t0
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    results["machine"]["load_avg_end"] = list(os.getloadavg())
    save()
    if not args.no_report:
        from bench.report import write_report

        write_report(results, args.doc, img_dir=args.img_dir, notes=args.notes)
        print(f"wrote {args.out} and {args.doc}", flush=True)
    return results


if __name__ == "__main__":
    main()
