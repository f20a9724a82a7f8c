"""The SHA-256 of a dataset's parsed content: the same rows, labels and values give the same
hash whatever file format, compression, layout or column names carried them.

Canonical form ``sodm-content-v1`` (``docs/architecture.md``, "Lineage"): the hash is

    SHA-256( b"sodm-content-v1\\n" + b"rows=<n>\\nfeatures=<d>\\nlabels=<int|float|str>\\n"
             + H(labels) + H(row counts) + H(columns) + H(values) )

where ``H`` is the raw 32-byte SHA-256 digest of a section and every number is
little-endian:

- labels, in row order, in the stored label type (``storage.normalize_labels``): int64
  or float64 values; text labels as the sorted distinct texts (each a uint32 byte length and
  its UTF-8 bytes) followed by each row's int64 index into that list;
- row counts: the number of nonzero features of each row, int64;
- columns: the 0-based column index of every nonzero feature, row after row, ascending
  within a row, int64;
- values: those features' values, float64, in the same order.

Zeros are not part of the content (a dense 0.0 and a missing LIBSVM index are the same), so
a CSV and a LIBSVM file of the same matrix hash alike. Rows are hashed in blocks of about a
million cells or entries, so the hash of a stored dataset can be computed with one block in
memory (``sodm backfill-hashes``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp

VERSION = b"sodm-content-v1\n"
BLOCK_CELLS = 1 << 20  # dense cells (or sparse entries) hashed at a time: ~50 MB of temporaries
CHUNK_ENTRIES = 1 << 20


class ContentHasher:
    """Feed the rows in order (``add_rows``, any block sizes), then ``hexdigest``.
    ``labels`` and ``kind`` are the stored labels and their type (``int``, ``float`` or
    ``str``: ``app.services.filestore.storage.normalize_labels``)."""

    def __init__(self, n_rows: int, n_features: int, labels: np.ndarray, kind: str) -> None:
        y = np.asarray(labels)
        if y.shape[0] != n_rows:
            raise ValueError(f"{y.shape[0]} labels for {n_rows} rows")
        self._head = VERSION + f"rows={n_rows}\nfeatures={n_features}\nlabels={kind}\n".encode()
        self._labels = _label_digest(y, kind)
        self._n_rows, self._n_features = n_rows, n_features
        self._seen = 0
        self._counts = hashlib.sha256()
        self._columns = hashlib.sha256()
        self._values = hashlib.sha256()

    def add_rows(self, X: np.ndarray | sp.spmatrix) -> None:
        if X.shape[1] != self._n_features:
            raise ValueError(f"rows of {X.shape[1]} features, expected {self._n_features}")
        if sp.issparse(X):
            counts, columns, values = _sparse_entries(X)
        else:
            D = np.asarray(X, dtype=np.float64)
            rows, columns = np.nonzero(D)
            values = D[rows, columns]
            counts = np.bincount(rows, minlength=D.shape[0])
        self._counts.update(np.asarray(counts, dtype="<i8").tobytes())
        for a in range(0, len(columns), CHUNK_ENTRIES):
            b = a + CHUNK_ENTRIES
            self._columns.update(np.asarray(columns[a:b], dtype="<i8").tobytes())
            self._values.update(np.asarray(values[a:b], dtype="<f8").tobytes())
        self._seen += X.shape[0]

    def hexdigest(self) -> str:
        if self._seen != self._n_rows:
            raise ValueError(f"hashed {self._seen} of {self._n_rows} rows")
        h = hashlib.sha256(self._head)
        for part in (self._labels, self._counts.digest(), self._columns.digest(),
                     self._values.digest()):
            h.update(part)
        return h.hexdigest()


def _label_digest(y: np.ndarray, kind: str) -> bytes:
    if kind == "int":
        return hashlib.sha256(np.asarray(y, dtype="<i8").tobytes()).digest()
    if kind == "float":
        return hashlib.sha256(np.asarray(y, dtype="<f8").tobytes()).digest()
    texts, codes = np.unique(y, return_inverse=True)
    h = hashlib.sha256()
    for text in texts.tolist():
        raw = str(text).encode("utf-8")
        h.update(len(raw).to_bytes(4, "little"))
        h.update(raw)
    h.update(np.asarray(codes, dtype="<i8").tobytes())
    return h.digest()


def _sparse_entries(X: sp.spmatrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row counts, columns and values of the nonzero entries, rows in order, columns
    ascending (a copy only when the matrix is not in that form already)."""
    csr = X.tocsr() if X.format != "csr" else X
    if not csr.has_canonical_format or (csr.data == 0).any():
        csr = csr.copy()
        csr.sum_duplicates()
        csr.eliminate_zeros()
    return np.diff(csr.indptr), csr.indices, csr.data


def content_sha256(X: np.ndarray | sp.spmatrix, y: np.ndarray, kind: str) -> str:
    """The content hash of a whole matrix and its stored labels (rows hashed in blocks)."""
    h = ContentHasher(X.shape[0], X.shape[1], y, kind)
    for block in iter_blocks(X):
        h.add_rows(block)
    return h.hexdigest()


def block_rows(n_features: int) -> int:
    """Rows per block of a dense matrix this wide (``BLOCK_CELLS`` cells)."""
    return max(1, BLOCK_CELLS // max(1, n_features))


def iter_blocks(X: np.ndarray | sp.spmatrix) -> Iterable[np.ndarray | sp.spmatrix]:
    """Consecutive row blocks of about ``BLOCK_CELLS`` dense cells or sparse entries."""
    n = X.shape[0]
    if n == 0:
        yield X
        return
    if not sp.issparse(X):
        step = block_rows(X.shape[1])
        for a in range(0, n, step):
            yield X[a:a + step]
        return
    X = X.tocsr() if X.format != "csr" else X
    a = 0
    while a < n:  # cut where the entries so far pass the budget (at least one row)
        b = int(np.searchsorted(X.indptr, X.indptr[a] + BLOCK_CELLS, side="right")) - 1
        b = min(n, max(a + 1, b))
        yield X[a:b]
        a = b
