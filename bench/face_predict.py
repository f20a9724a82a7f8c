"""How well another partition's model predicts an exact fit's optimum face.

    PYTHONPATH=. .venv/bin/python -m bench.face_predict ijcnn1.t 1e6 10 0.2 11463

Arguments: dataset, lam, gamma_mult (``gamma = gamma_mult / (d Var X)``, the "auto"
search's units), theta and the rows of each fit (a final-fit partition's size). Fits two
disjoint random sets of that many training rows (``numpy.random.default_rng(0)``), A and
B, at the same setting (``bench.single_fit.fit_subset``: one BLAS thread), and compares
B's optimum face (the rows with a nonzero dual: margin ``u = y f`` outside
``[1 - theta, 1 + theta]``) with the face A's margins on B's rows predict, and with the
band widened by ``w`` on each side. A Newton step could start from such a face only where
the two nearly agree.
"""

from __future__ import annotations

import sys

import numpy as np

from bench.data import load_split
from bench.single_fit import fit_subset


def main(argv: list[str]) -> int:
    ds, lam, gm, theta, m = argv[0], float(argv[1]), float(argv[2]), float(argv[3]), int(argv[4])
    s = load_split(ds)
    X, y = np.asarray(s.X_train, dtype=float), s.y_train
    gamma = gm / (X.shape[1] * float(np.var(X)))
    perm = np.random.default_rng(0).permutation(len(y))
    rows_a, rows_b = perm[:m], perm[m : 2 * m]
    fits = []
    for name, rows in (("A", rows_a), ("B", rows_b)):
        est, cpu = fit_subset(X[rows], y[rows], gamma, lam, theta)
        print(
            f"{ds} lam={lam:g} gamma={gm:g}x theta={theta:g}: fit {name} of {m} rows "
            f"{cpu:.2f} CPU s, faces {est.history_[0].get('faces_factored')}"
        )
        fits.append(est)
    est_a, est_b = fits
    face = np.zeros(m, dtype=bool)
    face[est_b.support_] = True
    sign = np.where(y[rows_b] == est_b.classes_[1], 1.0, -1.0)
    u_a, u_b = sign * est_a.decision_function(X[rows_b]), sign * est_b.decision_function(X[rows_b])
    print(
        f"B's optimum face: {face.sum()} rows; margins of A and B on B's rows: correlation "
        f"{np.corrcoef(u_a, u_b)[0, 1]:.3f}, mean |difference| {np.abs(u_a - u_b).mean():.3f}"
    )
    for w in (0.0, 0.05, 0.1, 0.2):
        pred = (u_a < 1 - theta - w) | (u_a > 1 + theta + w)
        print(
            f"  band widened by {w:g}: predicted {pred.sum()} rows, {np.sum(pred & face)} "
            f"on B's face, {np.sum(face & ~pred)} of it missed, {np.sum(pred & ~face)} not on it"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
