"""The paper's benchmark datasets from ``../shared/datasets``, split and scaled as in the paper.

Official test files where they exist, otherwise a stratified 80/20 split with seed 0; the
larger tasks ``cod-rna.t`` and ``ijcnn1.t`` reverse the official split (train on the official
test file, test on the official training file: 271,617 and 91,701 training rows); features
min-max scaled to [0, 1] with the scaler fitted on the training split only; the two labels
mapped to -1/+1 (the smaller value becomes -1).
"""

from __future__ import annotations

import lzma
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.model_selection import train_test_split

# ``SODM_DATASETS_DIR`` overrides the location (e.g. a copy on another machine).
SHARED = Path(os.environ.get("SODM_DATASETS_DIR")
              or Path(__file__).resolve().parents[1].parent / "shared" / "datasets")

# name -> (train file, official test file or None, n_features)
DATASETS: dict[str, tuple[str, str | None, int]] = {
    "svmguide1": ("svmguide1.xz", "svmguide1.t.xz", 4),
    "phishing": ("phishing.xz", None, 68),
    "a9a": ("a9a.xz", "a9a.t.xz", 123),
    "ijcnn1": ("ijcnn1.xz", "ijcnn1.t.xz", 22),
    "cod-rna": ("cod-rna.xz", "cod-rna.t.xz", 8),
    "skin_nonskin": ("skin_nonskin.xz", None, 3),
    "heart_scale": ("heart_scale.xz", None, 13),
    # the official splits reversed: the larger file trains
    "cod-rna.t": ("cod-rna.t.xz", "cod-rna.xz", 8),
    "ijcnn1.t": ("ijcnn1.t.xz", "ijcnn1.xz", 22),
}


@dataclass
class Split:
    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def read_libsvm(path: Path, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Read an xz-compressed LIBSVM file as dense float64 and its raw labels."""
    with lzma.open(path, "rb") as fh:
        X, y = load_svmlight_file(fh, n_features=n_features)
    return np.asarray(sp.csr_matrix(X).toarray(), dtype=np.float64), np.asarray(y)


def _to_pm1(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return np.where(y == classes[0], -1.0, 1.0)


def min_max_fit_apply(X_train: np.ndarray, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale to [0, 1] with min/max of the training split; constant features map to 0."""
    lo = X_train.min(axis=0)
    span = X_train.max(axis=0) - lo
    span[span == 0] = 1.0
    return (X_train - lo) / span, np.clip((X_test - lo) / span, -1.0, 2.0)


def load_split(name: str, max_train: int | None = None, seed: int = 0) -> Split:
    """The paper's protocol for ``name``; ``max_train`` takes a stratified subsample."""
    train_file, test_file, d = DATASETS[name]
    X, y = read_libsvm(SHARED / train_file, d)
    if test_file is not None:
        X_te, y_te = read_libsvm(SHARED / test_file, d)
    else:
        X, X_te, y, y_te = train_test_split(X, y, test_size=0.2, stratify=y, random_state=seed)
    classes = np.unique(y)
    y, y_te = _to_pm1(y, classes), _to_pm1(y_te, classes)
    if max_train is not None and len(y) > max_train:
        X, _, y, _ = train_test_split(X, y, train_size=max_train, stratify=y, random_state=seed)
    X, X_te = min_max_fit_apply(X, X_te)
    return Split(name, X, y, X_te, y_te)
