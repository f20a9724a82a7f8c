"""The benchmark suite: the SODM paper's Tables 2/3 protocol against the peers, in one command.

    .venv/bin/python -m bench.run [--quick] [--datasets NAME ...] [--methods NAME ...]
        [--repeats N] [--timeout S] [--out docs/benchmarks.json] [--doc docs/benchmarks.md]
        [--no-scaling] [--scaling-max-rows N]

For every dataset (``bench.data.load_split``: official test file or stratified 80/20 seed 0,
min-max fitted on the training split): (1) hyperparameters per family by 3-fold CV on a
stratified subsample of <= ``--cv-rows`` training rows (``bench.methods``), one child process
per dataset; (2) each method fitted on the whole training split in its own child process
(``bench.child``) with a wall-clock cap, ``--repeats`` times with seeds 0.. (default: 3 below
20,000 training rows, 1 above); fit / predict seconds, test accuracy, #SV and peak RSS.
Then the scaling study (``bench.scaling``) and the report (``bench.report``): the JSON file is
rewritten after every row, so an interrupted run still leaves everything that finished.
``--quick`` (CI): svmguide1 and phishing subsampled to 1,500 training rows, 1 repeat, a
two-point grid per family on 600 rows, a tiny scaling study.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.child import run_task
from bench.data import load_split
from bench.methods import (
    CACHE_MB,
    FAMILY_REFERENCE,
    GRIDS,
    METHODS,
    QUICK_GRIDS,
    expand,
)
from bench.report import docs_relative

REPO = Path(__file__).resolve().parents[1]
DATASETS = ["svmguide1", "phishing", "a9a", "ijcnn1", "cod-rna", "skin_nonskin"]
QUICK_DATASETS = ["svmguide1", "phishing"]
BIG_ROWS = 20000
# Run order (the table keeps METHODS' order): what the targets need first, in case of a cap.
PRIORITY = ["svc", "sodm-rbf", "linearsvc", "odm-linear", "sodm-linear", "odm-svrg", "odm-rbf",
            "dc-odm", "ca-odm", "dip-odm", "sodm-linear-spark", "mllib-linearsvc",
            "sodm-rbf-spark"]  # repeats default to 1 above this many training rows


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
    return {"label": os.environ.get("BENCH_MACHINE_LABEL", "this machine"),
            "nproc": len(os.sched_getaffinity(0)), "cpu_model": model or platform.processor(),
            "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "numpy": np.__version__,
            "scikit_learn": sklearn.__version__, "numba": numba.__version__,
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


def tune(name: str, families: list[str], data: Path, grids: dict, timeout: float,
         reuse: dict | None = None) -> dict:
    """CV per family (one child per family); a timed-out family keeps the grid's first point.

    ``reuse`` (``--tuning-from``): a family tuned there with the same grid and CV rows keeps
    that result (marked ``reused_from``); the CV runs the exact reference solvers, whose
    optimum does not change with solver speed-ups."""
    out = {}
    for fam in families:
        grid = expand(grids[fam])
        old = (reuse or {}).get("tuning", {}).get(fam)
        if old and old.get("status") == "ok" and old.get("n_rows") == reuse.get("cv_rows") \
                and [t["params"] for t in old.get("table", [])] == grid:
            out[fam] = {**old, "reused_from": reuse["source"]}
            print(f"  cv {name} {fam}: {old['best']} reused from {reuse['source']}", flush=True)
            continue
        res = run_task({"task": "cv", "method": FAMILY_REFERENCE[fam], "grid": grid,
                        "data": str(data)}, timeout)
        if res.get("status") != "ok":
            res = {**res, "best": grid[0], "fallback": True}
        out[fam] = res
        print(f"  cv {name} {fam}: {res.get('best')} "
              f"cv_acc={res.get('best_cv_accuracy', float('nan')):.4f} "
              f"({res.get('wall_s', 0):.1f}s, {res.get('status')})", flush=True)
    return out


def _summary(runs: list[dict]) -> dict:
    ok = [r for r in runs if r.get("status") == "ok"]
    if not ok:
        return {"status": runs[0].get("status", "error") if runs else "skipped"}
    s: dict = {"status": "ok", "repeats": len(ok)}
    for key in ("fit_s", "predict_s", "accuracy", "peak_rss_mb", "base_rss_mb", "n_sv"):
        vals = [r[key] for r in ok if r.get(key) is not None]
        if vals:
            s[key] = float(np.median(vals))
            s[key + "_min"], s[key + "_max"] = float(min(vals)), float(max(vals))
    s["n_train"] = ok[0]["n_train"]
    return s


def run_dataset(name: str, methods: list[str], args, work: Path, results: dict,
                save) -> None:
    max_train = 1500 if args.quick else None
    t0 = time.perf_counter()
    split = load_split(name, max_train=max_train)
    n_train = len(split.y_train)
    data = work / f"{name}.npz"
    _save_split(split, data)
    cv_data = work / f"{name}-cv.npz"
    cv_rows = _cv_subsample(split, args.cv_rows, cv_data)
    ds = results["datasets"].setdefault(name, {})
    ds.update(n_train=n_train, n_test=len(split.y_test), n_features=split.X_train.shape[1],
              cv_rows=cv_rows, load_s=time.perf_counter() - t0)
    print(f"{name}: train {n_train} test {len(split.y_test)} d {split.X_train.shape[1]}",
          flush=True)
    families = sorted({METHODS[m].family for m in methods})
    grids = QUICK_GRIDS if args.quick else GRIDS
    reuse = None
    if args.tuning_from is not None:
        prev = json.loads(args.tuning_from.read_text())["datasets"].get(name)
        if prev and prev.get("cv_rows") == cv_rows:
            reuse = {**prev, "source": docs_relative(args.tuning_from)}
    ds["tuning"] = tune(name, families, cv_data, grids, args.cv_timeout, reuse)
    save()
    repeats = args.repeats or (3 if n_train <= BIG_ROWS else 1)
    ds["repeats"] = repeats
    rows = ds.setdefault("methods", {})
    for m in sorted(methods, key=PRIORITY.index):
        method = METHODS[m]
        params = ds["tuning"][method.family]["best"]
        if method.max_train is not None and n_train > method.max_train:
            rows[m] = {"summary": {"status": "skipped", "reason":
                                   f"n_train {n_train} > {method.max_train}: the float64 "
                                   "kernel exceeds the 2 GB memory budget"},
                       "params": params, "runs": []}
            save()
            continue
        runs = []
        for rep in range(repeats):
            spec = {"task": "fit", "method": m, "params": params, "seed": rep,
                    "n_jobs": args.n_jobs, "data": str(data)}
            res = run_task(spec, args.timeout)
            runs.append(res)
            print(f"  {m:12s} rep {rep}: {res.get('status')} fit {res.get('fit_s', 0):8.2f}s "
                  f"acc {res.get('accuracy', float('nan')):.4f} "
                  f"peak {res.get('peak_rss_mb', 0):7.0f} MB sv {res.get('n_sv')}", flush=True)
            if res.get("status") != "ok":
                break  # a timeout / error is not retried with another seed
        rows[m] = {"params": params, "runs": runs, "summary": _summary(runs)}
        save()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI mode: small data, tiny grid")
    ap.add_argument("--datasets", nargs="+", choices=DATASETS, default=None)
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), default=None)
    ap.add_argument("--repeats", type=int, default=None,
                    help="fits per method (default 3 below 20k training rows, else 1)")
    ap.add_argument("--timeout", type=float, default=900.0, help="cap per fit, seconds")
    ap.add_argument("--cv-timeout", type=float, default=900.0, help="cap per CV, seconds")
    ap.add_argument("--cv-rows", type=int, default=None, help="CV subsample (3000; quick 600)")
    ap.add_argument("--n-jobs", type=int, default=2, help="processes for SODM and baselines")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks.json")
    ap.add_argument("--doc", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--img-dir", type=Path, default=None, help="PNGs (default: doc dir/img)")
    ap.add_argument("--notes", type=Path, default=None,
                    help="hand-written analysis included in the doc (default bench/notes.md)")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling study")
    ap.add_argument("--only-scaling", action="store_true", help="run the scaling study only")
    ap.add_argument("--scaling-max-rows", type=int, default=None)
    ap.add_argument("--scaling-timeout", type=float, default=None, help="cap per scaling fit")
    ap.add_argument("--no-report", action="store_true", help="write the JSON only")
    ap.add_argument("--tuning-from", type=Path, default=None,
                    help="reuse the CV results of this run JSON where grid and CV rows match")
    args = ap.parse_args(argv)
    if args.cv_rows is None:
        args.cv_rows = 600 if args.quick else 3000
    if args.quick and args.repeats is None:
        args.repeats = 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    datasets = [] if args.only_scaling else (
        args.datasets or (QUICK_DATASETS if args.quick else DATASETS))
    methods = args.methods or list(METHODS)
    command = "python -m bench.run " + " ".join(sys.argv[1:] if argv is None else argv)
    results: dict = {"command": command.strip(), "quick": args.quick, "machine": machine(),
                     "config": {"cache_mb": CACHE_MB, "n_jobs": args.n_jobs,
                                "timeout_s": args.timeout, "cv_rows": args.cv_rows,
                                "cv_folds": 3, "methods": methods, "datasets": datasets,
                                "grids": QUICK_GRIDS if args.quick else GRIDS},
                     "datasets": {}, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                     "json_name": docs_relative(args.out)}
    if args.out.exists() and not args.quick and args.datasets:
        # a partial rerun keeps the other datasets' rows
        old = json.loads(args.out.read_text())
        results["datasets"] = {k: v for k, v in old.get("datasets", {}).items()
                               if k not in datasets}
        if "scaling" in old and args.no_scaling:
            results["scaling"] = old["scaling"]
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        results["machine"]["load_avg_now"] = list(os.getloadavg())
        args.out.write_text(json.dumps(results, indent=1))

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        for name in datasets:
            run_dataset(name, methods, args, Path(tmp), results, save)
        if not args.no_scaling:
            from bench.scaling import run_scaling

            results["scaling"] = run_scaling(Path(tmp), quick=args.quick,
                                             max_rows=args.scaling_max_rows,
                                             timeout=args.scaling_timeout, save=save,
                                             results=results)
    results["total_s"] = time.perf_counter() - t0
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    save()
    if not args.no_report:
        from bench.report import write_report

        write_report(results, args.doc, img_dir=args.img_dir, notes=args.notes)
        print(f"wrote {args.out} and {args.doc}", flush=True)
    return results


if __name__ == "__main__":
    main()
