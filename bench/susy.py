"""The generated SUSY-shaped data of the scaling study (18 features, 2 classes, Bayes
accuracy ~0.8); its own module so that ``bench.child`` and ``bench.scaling`` both import it
without importing each other."""

from __future__ import annotations

import numpy as np

N_TEST = 20000


def _generate(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    z = rng.standard_normal((n, 8))
    score = z[:, :4].sum(axis=1) / 2 + 0.6 * (z[:, 4] ** 2 - z[:, 5] ** 2) \
        + 0.5 * z[:, 6] * z[:, 7] + 0.9 * rng.standard_normal(n)
    y = np.where(score > 0.1, 1.0, -1.0)
    high = np.column_stack([
        np.abs(z[:, 0] + z[:, 1]), np.abs(z[:, 2] - z[:, 3]), z[:, 4] ** 2, z[:, 5] ** 2,
        z[:, 6] * z[:, 7], np.sqrt((z[:, :4] ** 2).sum(axis=1)), np.exp(0.3 * z[:, 0]),
        np.tanh(z[:, 1] * z[:, 2]), z[:, 3] + 0.5 * z[:, 6], np.abs(z[:, 7]) ** 1.5])
    return np.hstack([z, high]), y


def susy_like(n: int, seed: int = 0) -> dict:
    """n training rows and a fixed 20,000-row test set, min-max scaled on the training rows."""
    X, y = _generate(n, np.random.default_rng([seed, n]))
    X_te, y_te = _generate(N_TEST, np.random.default_rng([seed, 10**9]))
    lo, span = X.min(axis=0), X.max(axis=0) - X.min(axis=0)
    span[span == 0] = 1.0
    return {"X_train": (X - lo) / span, "y_train": y,
            "X_test": np.clip((X_te - lo) / span, -1.0, 2.0), "y_test": y_te}
