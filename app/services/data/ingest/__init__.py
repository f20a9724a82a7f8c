"""Dataset ingestion: decompress, detect the format, parse and validate an uploaded file.

Each parser has a fast path (scikit-learn's C LIBSVM reader; Python's C ``csv`` module for the
row structure plus pyarrow's CSV reader for numbers; pyarrow for Parquet) and, only when that
fails, a slow diagnostic pass that finds the first offending line and explains it. The text
parsers stream the file in line-cut chunks (``text.PARSE_CHUNK``) into preallocated arrays, so
a parse needs the arrays it produces plus a few chunks, never the whole file. Every
rejection is a 422 ``ProblemError`` with the extensions ``line`` (1-based; ``row`` for
Parquet), ``field`` / ``column`` and ``value`` where they apply.

The modules: ``files`` (compression, format), ``text`` (the checks of text uploads, the
line and token caps), ``libsvm``, ``csv_text`` and ``parquet`` (one parser each), ``parsed``
(the result and its whole-dataset checks), ``errors`` (the problems they raise). The API
runs ``parse_file`` in a child process with CPU, memory and time limits
(``app.services.data.ingest_process``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from app.core.problems import ProblemError
from app.services.data.ingest.csv_text import parse_csv
from app.services.data.ingest.files import FORMATS, decompress, detect_compression, infer_format
from app.services.data.ingest.libsvm import parse_libsvm
from app.services.data.ingest.parquet import parse_parquet
from app.services.data.ingest.parsed import Parsed, check_caps, class_counts
from app.services.data.ingest.text import check_lengths

__all__ = ["FORMATS", "Parsed", "check_caps", "class_counts", "decompress",
           "detect_compression", "infer_format", "parse_file"]


def parse_file(path: Path, fmt: str, label_column: str,
               n_features: int | None = None) -> Parsed:
    """Parse and validate ``path`` as ``fmt``. ``n_features`` widens LIBSVM data to a known
    feature count (a test split whose last features are all zero, e.g. a9a.t)."""
    if fmt != "parquet":
        check_lengths(path, fmt)
    if fmt == "libsvm":
        parsed = parse_libsvm(path)
    elif fmt == "csv":
        parsed = parse_csv(path, label_column)
    else:
        parsed = parse_parquet(path, label_column)
    if n_features is not None:
        parsed.X = _widen(parsed.X, n_features, fmt)
    return parsed


def _widen(X: np.ndarray | sp.csr_matrix, n_features: int,
           fmt: str) -> np.ndarray | sp.csr_matrix:
    d = X.shape[1]
    if n_features == d:
        return X
    if n_features < d:
        raise ProblemError(422, "Invalid n_features",
                           detail=f"n_features={n_features} but the data has {d} features",
                           type="invalid-n-features", field="n_features", value=str(n_features))
    if fmt != "libsvm":
        raise ProblemError(422, "Invalid n_features",
                           detail=f"a {fmt} file has exactly {d} feature columns",
                           type="invalid-n-features", field="n_features", value=str(n_features))
    csr = sp.csr_matrix(X)
    return sp.csr_matrix((csr.data, csr.indices, csr.indptr), shape=(X.shape[0], n_features))
