"""What numba buys: the same exact-solver fits with numba's JIT and without it.

    PYTHONPATH=. .venv/bin/python -m bench.numba_speedup [--dataset a9a] [--rows 1000 3000]

Each mode runs in a child process of its own (``NUMBA_DISABLE_JIT=1`` must be set before
numba is imported; then every ``@njit`` kernel runs as the Python it is written in): one BLAS
thread, ``ODMClassifier`` fits of random subsets of the shared dataset
(features min-max scaled by ``bench.data``), one untimed fit first (compilation or cache
load). Prints CPU seconds per fit and mode, the ratio, and the accuracy on the first 2,000
test rows, which is the same in both modes (the same code computes the same model).
The quick start's size target of issue 17 rests on these numbers (docs/design-notes.md,
"Why numba").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

FITS = (("rbf", {"kernel": "rbf", "lam": 1e3, "gamma": 0.01, "theta": 0.5}),
        ("linear", {"kernel": "linear", "lam": 1e3, "theta": 0.5}))


def measure(dataset: str, rows: list[int], seed: int = 0) -> list[dict]:
    """This process's fits (the mode is whatever NUMBA_DISABLE_JIT says)."""
    import time

    import numba
    import numpy as np
    from threadpoolctl import threadpool_limits

    from bench.data import load_split
    from solver import ODMClassifier

    s = load_split(dataset)
    rng = np.random.default_rng(seed)
    out = []
    for m in rows:
        idx = rng.choice(len(s.y_train), min(m, len(s.y_train)), replace=False)
        X, y = s.X_train[idx], s.y_train[idx]
        for name, params in FITS:
            est = ODMClassifier(**params, scale=False, random_state=seed)
            with threadpool_limits(1):
                est.fit(X[:50], y[:50])  # compile (or load numba's cache) untimed
                t = time.process_time()
                est.fit(X, y)
                cpu = time.process_time() - t
            acc = float(est.score(s.X_test[:2000], s.y_test[:2000]))
            out.append({"kernel": name, "rows": int(len(y)), "cpu_s": cpu, "accuracy": acc,
                        "jit": not numba.config.DISABLE_JIT})
    return out


def run_mode(jit: bool, dataset: str, rows: list[int]) -> list[dict]:
    env = {**os.environ, "NUMBA_DISABLE_JIT": "0" if jit else "1"}
    code = ("import json, sys; from bench.numba_speedup import measure; "
            "print(json.dumps(measure(sys.argv[1], [int(r) for r in sys.argv[2:]])))")
    done = subprocess.run([sys.executable, "-c", code, dataset, *map(str, rows)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="a9a")
    ap.add_argument("--rows", type=int, nargs="+", default=[1000, 3000])
    a = ap.parse_args(argv)
    jit, py = run_mode(True, a.dataset, a.rows), run_mode(False, a.dataset, a.rows)
    print(f"# {a.dataset}, exact ODM, one BLAS thread, CPU seconds of one fit")
    print("| kernel | rows | numba JIT s | Python s | Python / JIT | accuracy (both) |")
    print("|---|---|---|---|---|---|")
    for j, p in zip(jit, py, strict=True):
        same = "same" if j["accuracy"] == p["accuracy"] else f"{p['accuracy']:.4f} without JIT"
        print(f"| {j['kernel']} | {j['rows']:,} | {j['cpu_s']:.3f} | {p['cpu_s']:.3f} | "
              f"{p['cpu_s'] / max(j['cpu_s'], 1e-3):.0f}x | {j['accuracy']:.4f} ({same}) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
