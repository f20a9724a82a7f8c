"""Landmarks (greedy determinant maximisation) and strata (nearest landmark in the RKHS)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solver.core.kernels import Kernel, kernel_matrix, rkhs_sq_distance
from solver.sodm.landmarks import assign_strata, landmark_candidates, select_landmarks


def _brute_force_greedy(K: np.ndarray, S: int) -> list[int]:
    chosen: list[int] = []
    for _ in range(S):
        best, best_det = -1, -np.inf
        for z in range(K.shape[0]):
            if z in chosen:
                continue
            idx = chosen + [z]
            det = np.linalg.det(K[np.ix_(idx, idx)])
            if det > best_det * (1 + 1e-9) + 1e-300:
                best, best_det = z, det
        chosen.append(best)
    return chosen


@pytest.mark.parametrize("kernel", [Kernel("rbf", gamma=2.0), Kernel("poly", gamma=0.7,
                                                                     degree=2, coef0=1.0),
                                    Kernel("linear")])
def test_landmarks_equal_brute_force_determinant_maximisation(kernel: Kernel) -> None:
    rng = np.random.default_rng(0)
    X = rng.random((14, 4))
    S = 4
    got = select_landmarks(X, kernel, S, 0)
    expected = _brute_force_greedy(kernel_matrix(kernel, X), S)
    assert got.tolist() == expected


def test_landmarks_stop_on_duplicates_and_sparse_input() -> None:
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    lm = select_landmarks(X, Kernel("rbf", gamma=1.0), 4, 0)
    assert lm.tolist() == [0, 1]  # the duplicates have zero Schur complement
    lm_sp = select_landmarks(sp.csr_matrix(X), Kernel("rbf", gamma=1.0), 4, 0)
    assert lm_sp.tolist() == [0, 1]


def test_candidate_subsample_is_reproducible() -> None:
    c1 = landmark_candidates(1000, 9, 100)
    np.testing.assert_array_equal(c1, landmark_candidates(1000, 9, 100))
    assert 50 < c1.size < 160 and np.all(np.diff(c1) > 0)
    X = np.random.default_rng(1).random((1000, 3))
    lm = select_landmarks(X, Kernel("rbf"), 5, 9, max_candidates=100)
    assert set(lm.tolist()) <= set(c1.tolist()) and len(lm) == 5


@pytest.mark.parametrize("kernel", [Kernel("rbf", gamma=3.0), Kernel("poly", degree=3),
                                    Kernel("linear")])
def test_strata_are_nearest_landmark(kernel: Kernel) -> None:
    rng = np.random.default_rng(2)
    X = rng.random((300, 5))
    lm = select_landmarks(X, kernel, 6, 0)
    strata = assign_strata(X, X[lm], kernel, block_elems=60)  # several blocks
    D = rkhs_sq_distance(kernel, X, X[lm])
    np.testing.assert_allclose(D[np.arange(300), strata], D.min(axis=1), atol=1e-9)
    assert strata[lm].tolist() == list(range(len(lm)))
