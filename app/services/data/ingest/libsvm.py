"""LIBSVM / svmlight text: ``label idx:val ...`` lines."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data.ingest.errors import echo, invalid, over_limit
from app.services.data.ingest.parsed import Parsed, check_classes
from app.services.data.ingest.text import BOM, NUM_RE, check_text, first_line, line_chunks

MAX_INDEX_DIGITS = 10  # a LIBSVM feature index past 10 digits is refused before int() reads it


def parse_libsvm(path: Path) -> Parsed:
    """``label idx:val ...`` lines, 1-based strictly ascending indices, finite values.

    The file is read in line-cut chunks of ``PARSE_CHUNK`` bytes; scikit-learn's C parser
    reads each and its CSR rows are written into arrays sized from the checking pass's
    counts (peak: the arrays plus a chunk). Only when it (or the finiteness check) fails
    does the line-by-line diagnosis run over the file, to name the first offending line."""
    stats = check_text(path, "libsvm")
    first = first_line(path)
    if b"," in first and b":" not in first:
        raise ProblemError(422, "Wrong format",
                           detail="declared format libsvm but line 1 looks like CSV",
                           type="wrong-format", declared="libsvm", detected="csv", line=1)
    csr = _CsrBuilder(stats.newlines + 1, stats.colons)
    diagnosed = False
    for chunk, offset, _ in line_chunks(path):
        if b"qid:" in chunk and not diagnosed:  # svmlight ranking files: not classification
            _diagnose_libsvm_file(path)
            diagnosed = True
        csr.add(*_load_libsvm_chunk(chunk.removeprefix(BOM) if offset == 0 else chunk, path))
    X, y = csr.assemble()
    if X.shape[0] == 0:
        raise ProblemError(422, "Empty dataset", detail="the file has no data lines",
                           type="empty-dataset", format="libsvm")
    if csr.non_finite:
        _diagnose_libsvm_file(path)  # NaN / inf / overflowing values
        raise invalid("libsvm", "a label or value is not a finite number")
    check_classes(y, "libsvm")
    return Parsed(X, y)


def _load_libsvm_chunk(chunk: bytes, path: Path) -> tuple[sp.csr_matrix, np.ndarray]:
    """scikit-learn's reading of one chunk; a failure is diagnosed over the whole file."""
    try:
        return load_svmlight_file(io.BytesIO(chunk), zero_based=False, dtype=np.float64)
    except (ValueError, OverflowError) as exc:
        _diagnose_libsvm_file(path)  # finds the first offending line and raises
        raise invalid("libsvm", f"unreadable LIBSVM data: {exc}") from exc


class _CsrBuilder:
    """CSR rows written chunk by chunk into arrays sized by upper bounds of the rows and
    entries (the file's newlines and colons): no copy at the end, and the pages past the
    last entry are never touched, so they take no memory. Records whether a label or
    value was not finite."""

    def __init__(self, max_rows: int, max_nnz: int) -> None:
        self.max_rows, self.max_nnz = max_rows, max_nnz
        self.arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.rows = self.nnz = 0
        self.n_features = 1
        self.non_finite = False

    def add(self, X: sp.csr_matrix, y: np.ndarray) -> None:
        if self.arrays is None:
            self.arrays = (np.empty(self.max_nnz, dtype=X.data.dtype),
                           np.empty(self.max_nnz, dtype=X.indices.dtype),
                           np.zeros(self.max_rows + 1, dtype=X.indptr.dtype),
                           np.empty(self.max_rows, dtype=y.dtype))
        data, indices, indptr, labels = self.arrays
        r0, k0, r1, k1 = self.rows, self.nnz, self.rows + X.shape[0], self.nnz + X.nnz
        if r1 > self.max_rows or k1 > self.max_nnz:
            raise invalid("libsvm", "unreadable LIBSVM data: more rows or entries than lines "
                                    "or colons")
        data[k0:k1], indices[k0:k1], labels[r0:r1] = X.data, X.indices, y
        indptr[r0 + 1:r1 + 1] = X.indptr[1:] + k0
        self.rows, self.nnz = r1, k1
        self.n_features = max(self.n_features, X.shape[1])
        self.non_finite = self.non_finite or not (
            np.all(np.isfinite(y)) and np.all(np.isfinite(X.data)))

    def assemble(self) -> tuple[sp.csr_matrix, np.ndarray]:
        """The matrix and the labels (views of the written part of the arrays)."""
        if self.arrays is None:  # no chunk read
            return sp.csr_matrix((0, 1)), np.empty(0)
        data, indices, indptr, labels = self.arrays
        k, r = self.nnz, self.rows
        X = sp.csr_array((data[:k], indices[:k], indptr[:r + 1]), (r, self.n_features))
        return sp.csr_matrix(X), labels[:r]


def _diagnose_libsvm_file(path: Path) -> None:
    """The diagnosis over the whole file, chunk by chunk with global line numbers."""
    for chunk, offset, line in line_chunks(path):
        text = (chunk.removeprefix(BOM) if offset == 0 else chunk).decode("utf-8")
        _diagnose_libsvm(text, line)


def _diagnose_libsvm(text: str, first_line: int = 1) -> None:
    """Raise a precise 422 for the first offending line (the slow path, errors only);
    ``text`` starts at line ``first_line`` of the file."""
    max_features = get_settings().limit_features
    for lineno, raw in enumerate(text.split("\n"), first_line):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tokens = line.split()
        label = tokens[0]
        if ":" in label:
            raise invalid("libsvm", f"line {lineno}: the line must start with a label",
                          line=lineno, field="label", value=label)
        if not NUM_RE.fullmatch(label):
            raise invalid("libsvm", f"line {lineno}: label {label!r} is not a number",
                          line=lineno, field="label", value=label)
        prev = 0
        for tok in tokens[1:]:
            idx_s, sep, val_s = tok.partition(":")
            if not sep or not idx_s or not val_s:
                raise invalid("libsvm", f"line {lineno}: malformed token {tok!r} "
                                        "(expected index:value)", line=lineno, field="token",
                              value=tok)
            if not (idx_s.isascii() and idx_s.isdigit()):
                raise invalid("libsvm", f"line {lineno}: feature index {idx_s!r} is not a "
                                        "positive integer", line=lineno, field="index",
                              value=tok)
            if len(idx_s) > MAX_INDEX_DIGITS:
                raise invalid("libsvm", f"line {lineno}: feature index {echo(idx_s)} is too "
                                        "large", line=lineno, field="index", value=tok)
            idx = int(idx_s)
            if idx > max_features:
                raise over_limit("features", idx, max_features, "SODM_LIMIT_FEATURES",
                                 format="libsvm", line=lineno, field="index",
                                 token=echo(tok))
            if idx < 1:
                raise invalid("libsvm", f"line {lineno}: feature index {idx} is not >= 1 "
                                        "(LIBSVM indices are 1-based)", line=lineno,
                              field="index", value=tok)
            if idx == prev:
                raise invalid("libsvm", f"line {lineno}: duplicate feature index {idx}",
                              line=lineno, field="index", value=tok)
            if idx < prev:
                raise invalid("libsvm", f"line {lineno}: feature indices are not ascending "
                                        f"({idx} after {prev})", line=lineno, field="index",
                              value=tok)
            prev = idx
            try:
                val = float(val_s)
            except ValueError:
                raise invalid("libsvm", f"line {lineno}: value {val_s!r} of feature {idx} is "
                                        "not a number", line=lineno, field="value",
                              value=tok) from None
            if not math.isfinite(val) or not NUM_RE.fullmatch(val_s):
                raise invalid("libsvm", f"line {lineno}: value {val_s!r} of feature {idx} is "
                                        "not a finite number", line=lineno, field="value",
                              value=tok)
