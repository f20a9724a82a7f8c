"""Balanced accuracy with and without ``class_weight="balanced"`` on a 1:20 subsample.

    PYTHONPATH=. nice -n 19 .venv/bin/python -m bench.weights --datasets a9a ijcnn1

For each dataset (``bench.data``: official test file, features min-max scaled on the training
split): a training subsample of ``--majority`` rows of the larger class and one twentieth as
many of the smaller one (``--ratio``), drawn with ``numpy.random.default_rng(seed)``; each
model fitted with the estimator's defaults (no tuning), once without weights and once with
``class_weight="balanced"``; scored on the whole official test file (its own class ratio;
balanced accuracy does not depend on it) and on a 1:20 subsample of it. Prints one line per
fit: accuracy, balanced accuracy, the recall of each class and the fit's CPU seconds
(``solver.core.cputime``: the whole process tree).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys

import numpy as np
from sklearn.metrics import accuracy_score, balanced_accuracy_score, recall_score

from bench.data import load_split

METHODS = {
    "odm-linear": ("ODMClassifier", {"kernel": "linear"}),
    "sodm-linear": ("SODMClassifier", {"kernel": "linear"}),
    "sodm-rbf": ("SODMClassifier", {"kernel": "rbf"}),
}


def subsample(y: np.ndarray, majority: int, ratio: int, seed: int) -> np.ndarray:
    """Row indices: ``majority`` rows of the larger class, ``majority // ratio`` of the other
    (all of a class when it has fewer), in a random order."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    big, small = classes[np.argmax(counts)], classes[np.argmin(counts)]
    take = []
    for c, k in ((big, majority), (small, majority // ratio)):
        rows = np.flatnonzero(y == c)
        take.append(rng.choice(rows, min(k, rows.size), replace=False))
    return rng.permutation(np.concatenate(take))


def scores(y: np.ndarray, pred: np.ndarray) -> str:
    rec = recall_score(y, pred, labels=[-1.0, 1.0], average=None, zero_division=0)
    return (f"acc {accuracy_score(y, pred):.4f}  bal_acc {balanced_accuracy_score(y, pred):.4f}"
            f"  recall(-1) {rec[0]:.4f}  recall(+1) {rec[1]:.4f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["a9a", "ijcnn1"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--majority", type=int, default=10_000)
    ap.add_argument("--ratio", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    import solver
    from solver.core.cputime import CpuClock

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    print(f"# bench.weights {' '.join(sys.argv[1:])}; commit {commit}; python "
          f"{platform.python_version()}; {platform.machine()}")
    for name in a.datasets:
        s = load_split(name)
        tr = subsample(s.y_train, a.majority, a.ratio, a.seed)
        te = subsample(s.y_test, a.majority, a.ratio, a.seed + 1)
        X, y = s.X_train[tr], s.y_train[tr]
        n_pos, n_neg = int(np.sum(y > 0)), int(np.sum(y < 0))
        print(f"\n## {name}: train {len(y)} rows ({n_neg} of -1, {n_pos} of +1), test "
              f"{len(s.y_test)} rows ({int(np.sum(s.y_test > 0))} of +1); 1:{a.ratio} test "
              f"subsample {len(te)} rows")
        for method in a.methods:
            cls, params = METHODS[method]
            for cw in (None, "balanced"):
                est = getattr(solver, cls)(**params, class_weight=cw, random_state=a.seed)
                with CpuClock() as clock:
                    est.fit(X, y)
                full = est.predict(s.X_test)
                sub = est.predict(s.X_test[te])
                print(f"{method:12s} class_weight={cw!s:8s} test: {scores(s.y_test, full)}"
                      f" | 1:{a.ratio} test: {scores(s.y_test[te], sub)}"
                      f" | fit {clock.seconds:.1f} CPU s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
