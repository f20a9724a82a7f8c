"""A parsed upload and the checks of it as a whole: at least two classes, and rows,
features, classes and dense cells within the caps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data.ingest.errors import over_limit
from app.services.filestore.storage import choose_layout, normalize_labels


@dataclass
class Parsed:
    """A parsed upload: features (dense or CSR), original labels, optional feature names."""

    X: np.ndarray | sp.csr_matrix
    y: np.ndarray
    feature_names: list[str] | None = None


def check_classes(y: np.ndarray, fmt: str) -> None:
    if y.size == 0:
        raise ProblemError(422, "Empty dataset", detail="the file has no data rows",
                           type="empty-dataset", format=fmt)
    counts = class_counts(y)
    if len(counts) < 2:
        only = next(iter(counts))
        raise ProblemError(422, "Fewer than two classes",
                           detail=f"all {y.size} rows have the label {only}; "
                                  "a classifier needs at least two classes",
                           type="too-few-classes", format=fmt, classes=list(counts))


def check_caps(parsed: Parsed, classes: dict[str, int], fmt: str) -> None:
    """Rows, features, classes (one-vs-rest problems, the confusion matrix) and the cells
    of the dense layout against the configured caps."""

    s = get_settings()
    n, d = parsed.X.shape
    for what, value, limit, setting in (
            ("rows", n, s.limit_rows, "SODM_LIMIT_ROWS"),
            ("features", d, s.limit_features, "SODM_LIMIT_FEATURES"),
            ("classes", len(classes), s.limit_classes, "SODM_LIMIT_CLASSES")):
        if value > limit:
            raise over_limit(what, value, limit, setting, format=fmt)
    nnz = int(parsed.X.nnz) if sp.issparse(parsed.X) else n * d
    if choose_layout(n, d, nnz) == "dense" and n * d > s.limit_dense_cells:
        raise over_limit("dense cells (rows x features)", n * d, s.limit_dense_cells,
                         "SODM_LIMIT_DENSE_CELLS", format=fmt)


def class_counts(y: np.ndarray) -> dict[str, int]:
    """``{label: count}`` with labels rendered as they are stored (int, float or text)."""

    y, _ = normalize_labels(y)
    values, counts = np.unique(y, return_counts=True)
    return {str(v.item() if hasattr(v, "item") else v): int(c)
            for v, c in zip(values, counts, strict=True)}
