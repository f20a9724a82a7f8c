"""How the faces of one kernel fit's direct Newton steps change, and how far the optimum moves.

    PYTHONPATH=. .venv/bin/python -m bench.face_churn --dataset ijcnn1.t --rows 6793 \\
        --lam 1e6 --gamma-mult 10 --theta 0.2 --seed 1

The fit is ``bench.single_fit``'s (the same rows, gamma and estimator) less the repeats of
identical rows (a kernel solve merges them, and the faces' row numbers are then the merged
problem's). It prints:

1. every face the fit's direct Newton steps solved: its rows, how many of them are on the
   optimum's face, whether it was factored or solved from the last factor
   (``solver.exact.newton_kernel.FaceSystems``), and the rows removed from and added to the
   face before (and moved between the zeta and beta sides);
2. the optimum's face at lam / sqrt(10) and lam * sqrt(10) against the one at lam: the rows
   on the same side in both, and the rows only one of them has there;
3. the effective dimension ``sum_i l_i / (l_i + D)`` of the optimum face's kernel matrix
   (``l_i`` its eigenvalues, ``D`` the zeta and the beta side's diagonal term): the rank a
   low-rank preconditioner of the face system would need.

What large-lam faces cost and why later faces are factored again is in docs/design-notes.md
("Why a large-lam fit factors several faces").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.single_fit import fit_arguments, fit_subset, subset


@dataclass
class _Face:
    rows: np.ndarray
    diag: np.ndarray  # each row's diagonal term: which side it is on
    factored: bool


@contextmanager
def _recorded_faces(seen: list[tuple[int, _Face]]) -> Iterator[None]:
    """Every face ``FaceSystems.solve`` solves inside the block, appended to ``seen`` by the
    solve (the ``FaceSystems``) it belongs to; the method is restored on leaving."""
    from solver.exact.newton_kernel import FaceSystems

    solve = FaceSystems.solve

    def recording(self: FaceSystems, S: np.ndarray, D: np.ndarray, t: np.ndarray,
                  target: float) -> np.ndarray | None:
        n = len(self.factored)
        x = solve(self, S, D, t, target)
        seen.append((id(self), _Face(S.copy(), D.copy(), len(self.factored) > n)))
        return x

    FaceSystems.solve = recording  # type: ignore[method-assign]
    try:
        yield
    finally:
        FaceSystems.solve = solve  # type: ignore[method-assign]


def _transitions(seen: list[tuple[int, _Face]], optimum: np.ndarray) -> None:
    last: dict[int, _Face] = {}
    for key, face in seen:
        before = last.get(key)
        how = "factored" if face.factored else "from the factor"
        on = int(np.count_nonzero(optimum[face.rows]))
        head = f"  face {face.rows.size:6d} rows, {on:6d} on the optimum's face ({how})"
        if before is None:
            print(head)
        else:
            kept, i_old, i_new = np.intersect1d(before.rows, face.rows, return_indices=True)
            removed, added = before.rows.size - kept.size, face.rows.size - kept.size
            moved = int(np.count_nonzero(before.diag[i_old] != face.diag[i_new]))
            print(f"{head}: {removed} removed, {added} added, {moved} moved side")
        last[key] = face


def _sides(est: Any, y: np.ndarray) -> np.ndarray:
    """+1 (zeta), -1 (beta) or 0 per row at the fitted optimum."""
    yy = np.where(y == est.classes_[1], 1.0, -1.0)
    d = yy[est.support_] * est.dual_coef_[0]
    side = np.zeros(len(y), dtype=np.int8)
    side[est.support_] = np.where(d > 0, 1, -1)
    return side


def main(argv: list[str] | None = None) -> int:
    a = fit_arguments(__doc__.splitlines()[0]).parse_args(argv)
    from sklearn.metrics.pairwise import rbf_kernel

    from solver.core.formulation import ODMParams

    X, y, gamma = subset(a.dataset, a.rows, a.seed, a.gamma_mult)
    _, first = np.unique(np.column_stack([X, y]), axis=0, return_index=True)
    X, y = X[np.sort(first)], y[np.sort(first)]
    seen: list[tuple[int, _Face]] = []  # the timed fit's faces (not the warm-up fit's)
    est, cpu = fit_subset(X, y, gamma, a.lam, a.theta, around=_recorded_faces(seen))
    side = _sides(est, y)
    print(f"{a.dataset} rows={len(y)} lam={a.lam:g} gamma={a.gamma_mult:g}x theta={a.theta:g} "
          f"seed={a.seed}: {cpu:.2f} CPU s, epochs {est.n_iter_}, the optimum's face "
          f"{np.count_nonzero(side)} rows; the direct steps' faces:")
    _transitions(seen, side)
    print("the optimum's face against the optimum at")
    for lam in (a.lam / math.sqrt(10.0), a.lam * math.sqrt(10.0)):
        other = _sides(fit_subset(X, y, gamma, lam, a.theta)[0], y)
        same = np.count_nonzero((other == side) & (side != 0))
        only = np.count_nonzero((side != 0) & (other != side))
        extra = np.count_nonzero((other != 0) & (side != other))
        print(f"  lam {lam:.3g}: {np.count_nonzero(other)} rows, {same} on the same side, "
              f"{only} of lam {a.lam:g}'s elsewhere, {extra} others")
    S = np.flatnonzero(side)
    eig = np.linalg.eigvalsh(rbf_kernel(X[S], gamma=gamma))
    dz, db = ODMParams(lam=a.lam, upsilon=float(est.upsilon), theta=a.theta).diag_terms(len(y))
    for name, d in (("zeta", dz), ("beta", db)):
        print(f"  effective dimension at the {name} side's D = {d:.3g}: "
              f"{float(np.sum(eig / (eig + d))):.0f} of {S.size}")
    return 0


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raise SystemExit(main())
