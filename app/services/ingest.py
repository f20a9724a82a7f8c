"""Dataset ingestion: decompress, detect the format, parse and validate an uploaded file.

Each parser has a fast path (scikit-learn's C LIBSVM reader; Python's C ``csv`` module for the
row structure plus pyarrow's CSV reader for numbers; pyarrow for Parquet) and, only when that
fails, a slow diagnostic pass that finds the first offending line and explains it. The text
parsers stream the file in line-cut chunks (``PARSE_CHUNK``) into preallocated arrays, so a
parse needs the arrays it produces plus a few chunks, never the whole file. Every
rejection is a 422 ``ProblemError`` with the extensions ``line`` (1-based; ``row`` for
Parquet), ``field`` / ``column`` and ``value`` where they apply.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import lzma
import math
import re
import zlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from app.config import get_settings
from app.problems import ProblemError

FORMATS = ("csv", "libsvm", "parquet")
_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".libsvm": "libsvm", ".svm": "libsvm",
               ".svmlight": "libsvm", ".txt": "libsvm", ".t": "libsvm", ".scale": "libsvm",
               ".parquet": "parquet", ".pq": "parquet"}
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
PARQUET_MAGIC = b"PAR1"
BOM = b"\xef\xbb\xbf"
CHUNK = 1 << 20
# bytes a text parser reads at a time (cut at a line end); its memory is the
# arrays it builds plus a few chunks (pyarrow reads up to 32 blocks of about a chunk ahead)
PARSE_CHUNK = 1 << 20
MAX_VALUE_ECHO = 80  # characters of an offending value echoed back
MAX_DETAIL = 400  # characters of a problem's detail
MAX_INDEX_DIGITS = 10  # a LIBSVM feature index past 10 digits is refused before int() reads it

# A decimal number. Possessive quantifiers (no backtracking into a digit run) keep every
# match linear in the token's length: "\d+\.?\d*" split a digit run in n ways, so a long
# digit run cost O(n^2) with the GIL held and froze the whole API.
_NUM = r"[+-]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+"
_NUM_RE = re.compile(_NUM)
# the first line of a LIBSVM file (CSV's wrong-format check): "label idx:val ...", linear
_LIBSVM_FIRST_LINE = re.compile(rf"[ \t]*+{_NUM}(?:[ \t]++\d++:{_NUM})++\s*+")


@dataclass
class Parsed:
    """A parsed upload: features (dense or CSR), original labels, optional feature names."""

    X: np.ndarray | sp.csr_matrix
    y: np.ndarray
    feature_names: list[str] | None = None


def _echo(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_VALUE_ECHO else text[:MAX_VALUE_ECHO] + "..."


def invalid(fmt: str, detail: str, **ext: Any) -> ProblemError:
    titles = {"libsvm": "Invalid LIBSVM data", "csv": "Invalid CSV data",
              "parquet": "Invalid Parquet data"}
    if "value" in ext:
        ext["value"] = _echo(ext["value"])
    if len(detail) > MAX_DETAIL:  # the detail quotes the offending token: cut a huge one
        detail = detail[:MAX_DETAIL] + "..."
    return ProblemError(422, titles.get(fmt, "Invalid dataset"), detail=detail,
                        type=f"invalid-{fmt}", format=fmt, **ext)


# ---------------------------------------------------------------- compression and format

def detect_compression(path: Path) -> str | None:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(XZ_MAGIC):
        return "xz"
    return None


def decompress(src: Path, kind: str, dest: Path, max_bytes: int) -> int:
    """Stream-decompress ``src`` into ``dest``, refusing (413) more than ``max_bytes`` of
    output (zip-bomb safe: output is counted chunk by chunk as it is produced); returns the
    output size. Corrupt or truncated streams are a 422."""
    opener: Any = gzip.open if kind == "gzip" else lzma.open
    written = 0
    try:
        with opener(src, "rb") as fin, open(dest, "wb") as fout:
            while chunk := fin.read(CHUNK):
                written += len(chunk)
                if written > max_bytes:
                    raise ProblemError(
                        413, "Decompressed upload too large",
                        detail=f"the {kind} upload expands beyond {max_bytes} bytes",
                        type="upload-too-large", limit_bytes=max_bytes)
                fout.write(chunk)
    except (lzma.LZMAError, zlib.error, EOFError, gzip.BadGzipFile) as exc:
        raise ProblemError(422, "Corrupt compressed upload",
                           detail=f"the {kind} stream cannot be decompressed ({exc})",
                           type="corrupt-compression") from exc
    return written


def infer_format(declared: str | None, filename: str | None) -> str:
    """The declared format, else the one implied by the file name (``.csv.gz`` -> csv)."""
    if declared:
        fmt = declared.strip().lower()
        if fmt in ("svmlight", "libsvm"):
            return "libsvm"
        if fmt not in FORMATS:
            raise ProblemError(422, "Unknown format", detail=f"format must be one of {FORMATS}",
                               type="unknown-format", field="format", value=_echo(declared))
        return fmt
    name = (filename or "").lower()
    for suffix in (".gz", ".xz"):
        name = name.removesuffix(suffix)
    for ext, fmt in _EXTENSIONS.items():
        if name.endswith(ext):
            return fmt
    raise ProblemError(422, "Unknown format",
                       detail="give format=csv|libsvm|parquet (it cannot be inferred from the "
                              "file name)", type="unknown-format", field="format")


def _line_chunks(path: Path, size: int) -> Iterator[tuple[bytes, int, int]]:
    """The file in chunks of about ``size`` bytes, each cut after a newline (a longer line
    makes its chunk longer): ``(chunk, byte offset, line number of its first line)``. A
    newline is ASCII, so a cut never splits a UTF-8 sequence."""
    offset, line, parts = 0, 1, []
    with open(path, "rb") as fh:
        while block := fh.read(size):
            cut = block.rfind(b"\n") + 1
            if not cut:
                parts.append(block)
                continue
            chunk = b"".join([*parts, block[:cut]]) if parts else block[:cut]
            parts = [block[cut:]] if cut < len(block) else []
            yield chunk, offset, line
            offset += len(chunk)
            line += chunk.count(b"\n")
    if parts:
        yield b"".join(parts), offset, line


@dataclass(frozen=True)
class _TextStats:
    """What the checking pass counted: the longest chunk (at least the longest line), and
    the newlines and colons (upper bounds of a LIBSVM file's rows and entries)."""

    longest: int
    newlines: int
    colons: int


def _check_text(path: Path, fmt: str) -> _TextStats:
    """Refuse an empty file, a Parquet file and binary content (NUL bytes, invalid UTF-8,
    named by line and byte offset) in one pass over line-cut chunks, before any parse
    error can be reported."""
    nonblank, longest, newlines, colons = False, 0, 0, 0
    for chunk, offset, line in _line_chunks(path, PARSE_CHUNK):
        if offset == 0 and chunk.startswith(PARQUET_MAGIC):
            raise ProblemError(422, "Wrong format",
                               detail=f"declared format {fmt} but the file is Parquet",
                               type="wrong-format", declared=fmt, detected="parquet")
        _check_utf8(chunk, fmt, offset, line)
        nonblank = nonblank or bool(chunk.strip())
        longest = max(longest, len(chunk))
        newlines += chunk.count(b"\n")
        colons += chunk.count(b":") if fmt == "libsvm" else 0
    if not nonblank:
        raise ProblemError(422, "Empty dataset", detail="the uploaded file has no data",
                           type="empty-dataset")
    return _TextStats(longest, newlines, colons)


def _check_utf8(chunk: bytes, fmt: str, offset: int, line: int) -> None:
    """Raise for the chunk's first NUL byte or invalid UTF-8 sequence."""
    nul = chunk.find(b"\x00")
    if chunk.isascii() and nul < 0:
        return
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        pos = exc.start if nul < 0 else min(nul, exc.start)
        raise _binary(fmt, line + chunk.count(b"\n", 0, pos), offset + pos) from exc
    if nul >= 0:
        raise _binary(fmt, line + chunk.count(b"\n", 0, nul), offset + nul)


def _first_line(path: Path, start: int = 0) -> bytes:
    """The line at byte ``start`` without its newline (a leading BOM removed)."""
    with open(path, "rb") as fh:
        fh.seek(start)
        line = fh.readline()
    return (line.removeprefix(BOM) if start == 0 else line).removesuffix(b"\n")


def _binary(fmt: str, line: int, pos: int) -> ProblemError:
    return ProblemError(422, "Not a text file",
                        detail=f"line {line}: binary content (byte offset {pos}); "
                               f"{fmt} uploads must be UTF-8 text",
                        type="binary-content", format=fmt, line=line, offset=pos)


def _check_classes(y: np.ndarray, fmt: str) -> None:
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


# ---------------------------------------------------------------- caps

def over_limit(what: str, value: int, limit: int, setting: str, **ext: Any) -> ProblemError:
    """413 naming the cap (``what``, its setting and limit) and the upload's value."""
    return ProblemError(413, "Dataset over a limit",
                        detail=f"{what}: {value} is over this server's limit of {limit} "
                               f"({setting})", type="dataset-over-limit", cap=what,
                        value=value, limit=limit, setting=setting, **ext)


def check_caps(parsed: Parsed, classes: dict[str, int], fmt: str) -> None:
    """Rows, features, classes (one-vs-rest problems, the confusion matrix) and the cells
    of the dense layout against the configured caps."""
    from app.services.storage import choose_layout

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


def _positions_over(a: np.ndarray, marks: np.ndarray, carry: int,
                    limit: int) -> tuple[int | None, int]:
    """Segments of ``a`` between ``marks`` (sorted positions), the first one starting
    ``carry`` bytes before ``a``: the end position of the first segment longer than
    ``limit`` (None: none), and the length of the open segment at the end."""
    bounds = np.concatenate(([-1 - carry], marks))
    over = np.flatnonzero(np.diff(bounds) - 1 > limit)
    if over.size:
        return int(marks[over[0]]), 0
    tail = len(a) - 1 - int(bounds[-1])
    return (len(a) if tail > limit else None), tail


def _may_hold_run(is_sep: np.ndarray, carry: int, limit: int) -> bool:
    """False when no run of more than ``limit`` non-separators can be in the chunk (nor
    continue the open one of ``carry`` bytes): every aligned block of (limit+1)/2 bytes
    holds a separator, and so do the first bytes. A cheap test before the exact one."""
    block = (limit + 1) // 2
    first = int(is_sep.argmax()) if is_sep[0] or is_sep.any() else len(is_sep)
    if carry + first > limit:
        return True
    m = len(is_sep) // block * block
    return m == 0 or not bool(is_sep[:m].reshape(-1, block).any(axis=1).all())


def check_lengths(path: Path, fmt: str) -> None:
    """Refuse (413, naming the line) a line or a token longer than the caps, in one pass
    over fixed-size chunks with numpy (linear, no regular expression)."""
    s = get_settings()
    seps = np.zeros(256, dtype=bool)
    seps[list(b" \t\r\n" + (b",;" if fmt == "csv" else b""))] = True
    line_no, offset, line_start, line_len, tok_len = 1, 0, 0, 0, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(16 * CHUNK):
            a = np.frombuffer(chunk, dtype=np.uint8)
            is_nl = a == 10
            n_nl = int(np.count_nonzero(is_nl))
            line_end, line_len = _run_over(is_nl, line_len, s.limit_line_bytes)
            tok_end, tok_len = _run_over(seps[a], tok_len, s.limit_token_bytes)
            if line_end is not None or tok_end is not None:
                nl = np.flatnonzero(is_nl)
                if line_end is not None:
                    line = line_no + int(np.searchsorted(nl, line_end))
                    raise over_limit("line bytes", s.limit_line_bytes + 1,
                                     s.limit_line_bytes, "SODM_LIMIT_LINE_BYTES", format=fmt,
                                     line=line, field="line")
                k = int(np.searchsorted(nl, tok_end))
                near = offset + int(tok_end) - s.limit_token_bytes - 1
                raise _long_token(path, fmt, line_no + k,
                                  offset + int(nl[k - 1]) + 1 if k else line_start,
                                  max(near, 0))
            if n_nl:
                line_start = offset + len(a) - 1 - int(is_nl[::-1].argmax()) + 1
            line_no += n_nl
            offset += len(a)


def _run_over(is_sep: np.ndarray, carry: int, limit: int) -> tuple[int | None, int]:
    """The end position of the first run of more than ``limit`` non-separators (the first
    continuing the open run of ``carry`` bytes), or None; and the open run at the end."""
    if not _may_hold_run(is_sep, carry, limit):
        return None, int(is_sep[::-1].argmax())
    return _positions_over(is_sep, np.flatnonzero(is_sep), carry, limit)


def _long_token(path: Path, fmt: str, line: int, line_start: int,
                near: int) -> ProblemError:
    """413 for a token over the cap, naming its line and field (LIBSVM: label, index or
    value; CSV: header or cell). ``near`` is an offset inside the token."""
    limit = get_settings().limit_token_bytes
    with open(path, "rb") as fh:
        fh.seek(line_start)
        head = fh.read(max(0, near - line_start) + 2 * limit + 2)
    rel = near - line_start
    sep = b" \t\r\n" + (b",;" if fmt == "csv" else b"")
    start = max(head.rfind(bytes([c]), 0, rel) for c in sep) + 1
    token = head[start:start + limit + 1]
    if fmt == "csv":
        field = "header" if line == 1 else "cell"
    elif not head[:start].strip():
        field = "label"
    else:
        colon = token.find(b":")
        field = "value" if 0 <= colon < limit else "index"
    return over_limit("token bytes", limit + 1, limit, "SODM_LIMIT_TOKEN_BYTES", format=fmt,
                      line=line, field=field, token=_echo(token.decode("utf-8", "replace")))


# ---------------------------------------------------------------- LIBSVM

def parse_libsvm(path: Path) -> Parsed:
    """``label idx:val ...`` lines, 1-based strictly ascending indices, finite values.

    The file is read in line-cut chunks of ``PARSE_CHUNK`` bytes; scikit-learn's C parser
    reads each and its CSR rows are written into arrays sized from the checking pass's
    counts (peak: the arrays plus a chunk). Only when it (or the finiteness check) fails
    does the line-by-line diagnosis run over the file, to name the first offending line."""
    stats = _check_text(path, "libsvm")
    first = _first_line(path)
    if b"," in first and b":" not in first:
        raise ProblemError(422, "Wrong format",
                           detail="declared format libsvm but line 1 looks like CSV",
                           type="wrong-format", declared="libsvm", detected="csv", line=1)
    csr = _CsrBuilder(stats.newlines + 1, stats.colons)
    diagnosed = False
    for chunk, offset, _ in _line_chunks(path, PARSE_CHUNK):
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
    _check_classes(y, "libsvm")
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
    for chunk, offset, line in _line_chunks(path, PARSE_CHUNK):
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
        if not _NUM_RE.fullmatch(label):
            raise invalid("libsvm", f"line {lineno}: label {label!r} is not a number",
                          line=lineno, field="label", value=label)
        prev = 0
        for tok in tokens[1:]:
            idx_s, sep, val_s = tok.partition(":")
            if not sep or not idx_s or not val_s:
                raise invalid("libsvm", f"line {lineno}: malformed token {tok!r} "
                                        "(expected index:value)", line=lineno, field="token",
                              value=tok)
            if not idx_s.isdigit():
                raise invalid("libsvm", f"line {lineno}: feature index {idx_s!r} is not a "
                                        "positive integer", line=lineno, field="index",
                              value=tok)
            if len(idx_s) > MAX_INDEX_DIGITS:
                raise invalid("libsvm", f"line {lineno}: feature index {_echo(idx_s)} is too "
                                        "large", line=lineno, field="index", value=tok)
            idx = int(idx_s)
            if idx > max_features:
                raise over_limit("features", idx, max_features, "SODM_LIMIT_FEATURES",
                                 format="libsvm", line=lineno, field="index",
                                 token=_echo(tok))
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
            if not math.isfinite(val) or not _NUM_RE.fullmatch(val_s):
                raise invalid("libsvm", f"line {lineno}: value {val_s!r} of feature {idx} is "
                                        "not a finite number", line=lineno, field="value",
                              value=tok)


# ---------------------------------------------------------------- CSV

def parse_csv(path: Path, label_column: str) -> Parsed:
    """A header row, one label column (numbers or text), numeric finite feature columns.

    Two streaming passes: Python's C ``csv`` module reads the row structure (header, field
    counts, each row's line number), then pyarrow's streaming reader parses the numbers
    block by block into a preallocated matrix; labels are kept as codes into their distinct
    texts. Peak memory: the arrays plus a few blocks."""
    longest = _check_text(path, "csv").longest
    start, offset = _csv_start(path)
    first = _first_line(path, start).decode("utf-8")
    if _LIBSVM_FIRST_LINE.fullmatch(first):
        raise ProblemError(422, "Wrong format",
                           detail="declared format csv but line 1 looks like LIBSVM",
                           type="wrong-format", declared="csv", detected="libsvm", line=1)
    src = _CsvText(path, start, offset, _delimiter(first), longest + 2)
    header, lines = _csv_structure(src, label_column)
    fill = _CsvFill(lines.size, header, label_column)
    for batch in _csv_batches(src, header, label_column):
        fill.add(batch)
    features = [h for h in header if h != label_column]
    fill.check(lines, features)
    y = _labels_from_codes(fill.labels, lines, "csv", label_column)
    _check_classes(y, "csv")
    return Parsed(fill.X, y, feature_names=features)


@dataclass(frozen=True)
class _CsvText:
    """Where a CSV file's rows start (past a BOM and blank lines), the count of blank lines
    before them, the delimiter and pyarrow's block size (longer than any line)."""

    path: Path
    start: int
    offset: int
    delim: str
    block: int

    def open_text(self) -> io.TextIOWrapper:
        raw = open(self.path, "rb")  # noqa: SIM115 - closed with the wrapper
        raw.seek(self.start)
        return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def _csv_start(path: Path) -> tuple[int, int]:
    """The byte offset past a BOM and the blank lines at the start, and their newlines."""
    with open(path, "rb") as fh:
        start = len(BOM) if fh.read(len(BOM)) == BOM else 0
        fh.seek(start)
        newlines = 0
        while block := fh.read(CHUNK):
            rest = block.lstrip(b"\r\n")
            newlines += block.count(b"\n", 0, len(block) - len(rest))
            start += len(block) - len(rest)
            if rest:
                break
    return start, newlines


def _csv_structure(src: _CsvText, label_column: str) -> tuple[list[str], np.ndarray]:
    """The header and each data row's line number (int64), checking field counts."""
    header: list[str] | None = None
    lines = array("q")
    with src.open_text() as fh:
        reader = csv.reader(fh, delimiter=src.delim)
        for row in _csv_rows(reader, src.offset):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            lineno = reader.line_num + src.offset
            if header is None:
                header = _csv_header(row, lineno, label_column)
            elif len(row) != len(header):
                raise invalid("csv", f"line {lineno}: {len(row)} fields, the header has "
                                     f"{len(header)}", line=lineno, field="row",
                              value=src.delim.join(row))
            else:
                lines.append(lineno)
    if header is None or not lines:
        raise ProblemError(422, "Empty dataset", detail="the CSV file has no data rows",
                           type="empty-dataset", format="csv")
    return header, np.frombuffer(lines, dtype=np.int64)


def _csv_header(row: list[str], lineno: int, label_column: str) -> list[str]:
    """The column names: the label among them, no duplicates, at least one feature."""
    header = [h.strip() for h in row]
    cap = get_settings().limit_features
    if len(header) > cap + 1:
        raise over_limit("features", len(header) - 1, cap, "SODM_LIMIT_FEATURES",
                         format="csv", line=lineno)
    if label_column not in header:
        raise ProblemError(422, "Missing label column",
                           detail=f"no column named {label_column!r} in the header "
                                  "(set label_column)", type="missing-label-column",
                           format="csv", line=lineno, column=label_column,
                           columns=header[:50])
    if len(set(header)) != len(header):
        dup = next(h for h in header if header.count(h) > 1)
        raise invalid("csv", f"line {lineno}: duplicate column name {dup!r}",
                      line=lineno, column=dup, value=dup)
    if len(header) < 2:
        raise invalid("csv", "there are no feature columns besides the label",
                      line=lineno, column=label_column)
    return header


def _csv_batches(src: _CsvText, header: list[str],
                 label_column: str) -> Iterator[pa.RecordBatch]:
    """pyarrow's record batches of the rows (header skipped); a parse error is diagnosed
    over the whole file to name the first offending cell."""
    types = {h: pa.float64() for h in header if h != label_column}
    types[label_column] = pa.string()
    with pa.OSFile(str(src.path)) as fh:
        fh.seek(src.start)
        try:
            reader = pacsv.open_csv(
                fh, read_options=pacsv.ReadOptions(column_names=header, skip_rows=1,
                                                   block_size=src.block),
                parse_options=pacsv.ParseOptions(delimiter=src.delim, ignore_empty_lines=True,
                                                 newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    column_types=types, strings_can_be_null=False,
                    quoted_strings_can_be_null=False))
            while (batch := _next_batch(reader)) is not None:
                yield batch
        except pa.ArrowInvalid as exc:
            _diagnose_csv_cells(src, header, label_column)
            raise invalid("csv", f"unreadable CSV data: {exc}") from exc


def _next_batch(reader: pacsv.CSVStreamingReader) -> pa.RecordBatch | None:
    try:
        return reader.read_next_batch()
    except StopIteration:
        return None


class _CsvFill:
    """The feature matrix (rows known from the structure pass) filled batch by batch, the
    first empty and first non-finite row of each feature column, and the label codes.
    Problems are reported after the last batch, column by column as a whole-file read
    would."""

    def __init__(self, n: int, header: list[str], label_column: str) -> None:
        self.cols = [j for j, h in enumerate(header) if h != label_column]
        self.label_at = header.index(label_column)
        self.X = np.empty((n, len(self.cols)), dtype=np.float64)
        self.first_null = np.full(len(self.cols), -1, dtype=np.int64)
        self.first_bad = np.full(len(self.cols), -1, dtype=np.int64)
        self.labels = _LabelCodes(n)
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        r0, r1 = self.rows, self.rows + batch.num_rows
        if r1 > self.X.shape[0]:
            raise invalid("csv", "unreadable CSV data: pyarrow reads more rows than the "
                                 "csv module")
        block = self.X[r0:r1]
        for j, c in enumerate(self.cols):
            col = batch.column(c)
            block[:, j] = col.to_numpy(zero_copy_only=False)
            if col.null_count and self.first_null[j] < 0:
                self.first_null[j] = r0 + _first_true(pc.is_null(col))
        bad = ~np.isfinite(block)
        if bad.any():
            self._record_bad(bad, batch, r0)
        self.labels.add(batch.column(self.label_at), r0)
        self.rows = r1

    def _record_bad(self, bad: np.ndarray, batch: pa.RecordBatch, r0: int) -> None:
        """The first non-finite value (nulls aside) of each column that has none yet."""
        for j in np.flatnonzero(bad.any(axis=0) & (self.first_bad < 0)):
            rows = bad[:, j]
            col = batch.column(self.cols[j])
            if col.null_count:
                rows = rows & ~pc.is_null(col).to_numpy(zero_copy_only=False)
            if rows.any():
                self.first_bad[j] = r0 + int(rows.argmax())

    def check(self, lines: np.ndarray, features: list[str]) -> None:
        """Raise for the first column with an empty cell or a non-finite value."""
        if self.rows != self.X.shape[0]:
            raise invalid("csv", "unreadable CSV data: pyarrow reads fewer rows than the "
                                 "csv module")
        for j, name in enumerate(features):
            if self.first_null[j] >= 0:
                line = int(lines[self.first_null[j]])
                raise invalid("csv", f"line {line}: column {name!r} is empty", line=line,
                              column=name, value="")
            if self.first_bad[j] >= 0:
                value = self.X[self.first_bad[j], j]
                line = int(lines[self.first_bad[j]])
                raise invalid("csv", f"line {line}: column {name!r} value {value!r} is not "
                                     "finite", line=line, column=name, value=str(value))


def _first_true(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


class _LabelCodes:
    """Each row's label (stripped) as a code into the distinct label texts: one int32 per
    row instead of a Python string per row."""

    def __init__(self, n: int) -> None:
        self.codes = np.empty(n, dtype=np.int32)
        self.texts: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, col: pa.Array, r0: int) -> None:
        enc = pc.dictionary_encode(col)
        remap = np.array([self._code(s.strip()) for s in enc.dictionary.to_pylist()],
                         dtype=np.int32)
        self.codes[r0:r0 + len(col)] = remap[enc.indices.to_numpy(zero_copy_only=False)]

    def _code(self, text: str) -> int:
        code = self.index.setdefault(text, len(self.texts))
        if code == len(self.texts):
            self.texts.append(text)
        return code


def _csv_rows(reader: Any, offset: int) -> Iterator[list[str]]:
    """The reader's rows; its own errors (a field over ``csv``'s field size limit, a bad
    quote) become a 422 naming the line."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            line = reader.line_num + offset
            raise invalid("csv", f"line {line}: {exc}", line=line, field="row") from None
        yield row


def _delimiter(header: str) -> str:
    """The header's delimiter: the most frequent of ``,``, ``;`` and tab (comma on a tie).
    One counting pass; ``csv.Sniffer``'s quote patterns backtrack on long lines."""
    counts = {d: header.count(d) for d in (",", ";", "\t")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] > counts[","] else ","


def _labels_from_codes(labels: _LabelCodes, lines: np.ndarray, fmt: str,
                       column: str) -> np.ndarray:
    """Numbers when every label parses as a finite number, else the text itself; an empty
    label is refused first (the first row that has one)."""
    codes, texts = labels.codes, labels.texts
    if "" in labels.index:
        line = int(lines[int(np.argmax(codes == labels.index[""]))])
        raise invalid(fmt, f"line {line}: the label is empty", line=line, column=column,
                      value="")
    try:
        nums = np.array([float(s) for s in texts], dtype=np.float64)
    except ValueError:
        return np.array(texts, dtype=str)[codes]
    y = nums[codes]
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        i = int(bad[0])
        text, line = texts[codes[i]], int(lines[i])
        raise invalid(fmt, f"line {line}: label {text!r} is not finite", line=line,
                      column=column, value=text)
    return y


_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity",
               "-infinity"}


def _diagnose_csv_cells(src: _CsvText, header: list[str], label: str) -> None:
    """Raise for the first feature cell that is not a number (NaN/inf are left to the
    finiteness check, which reports them with their own message)."""
    with src.open_text() as fh:
        reader = csv.reader(fh, delimiter=src.delim)
        rows = _csv_rows(reader, src.offset)
        next(rows, None)  # header
        for row in rows:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num + src.offset
            for name, cell in zip(header, row, strict=False):
                value = cell.strip()
                if name == label or _NUM_RE.fullmatch(value) or value.lower() in _NON_FINITE:
                    continue
                msg = "is empty" if not value else f"value {cell!r} is not a number"
                raise invalid("csv", f"line {line}: column {name!r} {msg}", line=line,
                              column=name, value=cell)


# ---------------------------------------------------------------- Parquet

def parse_parquet(path: Path, label_column: str) -> Parsed:
    """A label column and numeric feature columns (a ``row_id`` column is ignored), or the
    sparse contract form (``indices``/``values`` list columns)."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head != PARQUET_MAGIC:
        detected = "compressed" if head[:2] == GZIP_MAGIC else "text" if _is_text(path) else None
        raise ProblemError(422, "Wrong format",
                           detail="declared format parquet but the file is not Parquet"
                                  + (f" (it looks like {detected})" if detected else ""),
                           type="wrong-format", declared="parquet", detected=detected)
    _check_parquet_footer(path)
    pf = _open_parquet(path, label_column)
    names = pf.schema_arrow.names
    if label_column not in names:
        raise ProblemError(422, "Missing label column",
                           detail=f"no column named {label_column!r} (set label_column)",
                           type="missing-label-column", format="parquet", column=label_column,
                           columns=names[:50])
    sparse = "indices" in names and "values" in names and pa.types.is_list(
        pf.schema_arrow.field("indices").type)
    if not sparse:
        _check_feature_types(pf, path, [n for n in names if n not in (label_column, "row_id")])
    try:
        table = pf.read()
    except (pa.ArrowException, OSError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc
    if table.num_rows == 0:
        raise ProblemError(422, "Empty dataset", detail="the Parquet file has no rows",
                           type="empty-dataset", format="parquet")
    y = _parquet_labels(table.column(label_column), label_column)
    if sparse:
        X = _parquet_sparse(table)
        feature_names = None
    else:
        features = [n for n in names if n not in (label_column, "row_id")]
        if not features:
            raise invalid("parquet", "there are no feature columns besides the label",
                          column=label_column)
        X = np.empty((table.num_rows, len(features)), dtype=np.float64)
        for j, name in enumerate(features):
            X[:, j] = _parquet_numeric(table.column(name), name)
        feature_names = features
    _check_classes(y, "parquet")
    return Parsed(X, y, feature_names=feature_names)


_PARQUET_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}


def _check_parquet_footer(path: Path) -> None:
    """Rows, columns and uncompressed bytes from the footer, before any column is read: a
    small file whose pages expand past the caps (a Parquet bomb) is refused unread. Values
    count at their decoded width (a run of zeros encodes to a few bytes)."""
    s = get_settings()
    try:
        md = pq.ParquetFile(path).metadata
    except (pa.ArrowException, OSError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc
    expanded = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        for j in range(rg.num_columns):
            col = rg.column(j)  # fixed-width values by count (runs of zeros encode to nothing)
            width = _PARQUET_WIDTHS.get(col.physical_type, 0)
            expanded += max(col.total_uncompressed_size, width * col.num_values)
    for what, value, limit, setting in (
            ("rows", md.num_rows, s.limit_rows, "SODM_LIMIT_ROWS"),
            ("columns", md.num_columns, s.limit_features + 2, "SODM_LIMIT_FEATURES"),
            ("uncompressed bytes", expanded, s.max_decompressed_bytes,
             "SODM_MAX_DECOMPRESSED_BYTES")):
        if value > limit:
            raise over_limit(what, value, limit, setting, format="parquet")


def _is_text(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(4096)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def _parquet_numeric(col: pa.ChunkedArray, name: str) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t)):
        first = col.slice(0, 1).to_pylist()[0] if len(col) else None
        raise invalid("parquet", f"column {name!r} has type {t}, not a number", column=name,
                      value=str(first))
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise invalid("parquet", f"row {row + 1}: column {name!r} is null", row=row + 1,
                      column=name, value="null")
    values = col.cast(pa.float64()).to_numpy()
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        row = int(bad[0])
        raise invalid("parquet", f"row {row + 1}: column {name!r} value {values[row]!r} is not "
                                 "finite", row=row + 1, column=name, value=str(values[row]))
    return values


def _open_parquet(path: Path, label_column: str) -> pq.ParquetFile:
    """The file, a text label column read dictionary-encoded: a few long strings repeated
    over many rows stay one copy each until their count and lengths are checked."""
    try:
        schema = pq.ParquetFile(path).schema_arrow
        label = schema.field(label_column).type if label_column in schema.names else None
        text = label is not None and (pa.types.is_string(label) or pa.types.is_large_string(label)
                                      or pa.types.is_binary(label))
        return pq.ParquetFile(path, read_dictionary=[label_column] if text else None)
    except (pa.ArrowException, OSError) as exc:
        raise invalid("parquet", f"unreadable Parquet file: {exc}") from exc


def _is_number_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
            or pa.types.is_decimal(t))


def _check_feature_types(pf: pq.ParquetFile, path: Path, features: list[str]) -> None:
    """Feature columns must be numbers: refused from the schema, before any column is read
    (only the offending column's first value is read, dictionary-encoded, to echo it)."""
    for name in features:
        t = pf.schema_arrow.field(name).type
        if _is_number_type(t):
            continue
        first = None
        if pf.metadata.num_row_groups and pf.metadata.row_group(0).num_rows:
            with contextlib.suppress(pa.ArrowException, OSError):
                one = pq.ParquetFile(path, read_dictionary=[name]).read_row_group(
                    0, columns=[name])
                first = one.column(name).slice(0, 1).to_pylist()[0]
        raise invalid("parquet", f"column {name!r} has type {t}, not a number", column=name,
                      value=str(first))


def _label_dictionary_caps(col: pa.ChunkedArray, name: str) -> None:
    """Distinct labels (classes cap) and their lengths (token cap) of a dictionary-encoded
    text label column, checked before the labels are decoded row by row."""
    s = get_settings()
    values = pa.chunked_array([c.dictionary for c in col.chunks], type=col.type.value_type)
    distinct = pc.unique(values)
    if len(distinct) > s.limit_classes:
        raise over_limit("classes", len(distinct), s.limit_classes, "SODM_LIMIT_CLASSES",
                         format="parquet", column=name)
    longest = int(pc.max(pc.binary_length(distinct)).as_py() or 0)
    if longest > s.limit_token_bytes:
        raise over_limit("token bytes", longest, s.limit_token_bytes,
                         "SODM_LIMIT_TOKEN_BYTES", format="parquet", column=name,
                         field="label")


def _parquet_labels(col: pa.ChunkedArray, name: str) -> np.ndarray:
    if pa.types.is_dictionary(col.type):
        if not _is_number_type(col.type.value_type):
            _label_dictionary_caps(col, name)
        col = col.cast(col.type.value_type)
    t = col.type
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise invalid("parquet", f"row {row + 1}: the label is null", row=row + 1, column=name,
                      value="null")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.array(col.to_pylist(), dtype=str)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return col.cast(pa.int64()).to_numpy()
    return _parquet_numeric(col, name)


def _parquet_sparse(table: pa.Table) -> sp.csr_matrix:
    idx = table.column("indices").combine_chunks()
    val = table.column("values").combine_chunks()
    indptr = idx.offsets.to_numpy().astype(np.int64)
    indptr -= indptr[0]
    indices = idx.flatten().to_numpy(zero_copy_only=False)
    data = val.flatten().to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.array_equal(val.offsets.to_numpy() - val.offsets.to_numpy()[0], indptr):
        raise invalid("parquet", "indices and values lists differ in length", column="values")
    if indices.size and (indices.min() < 0 or not np.all(np.isfinite(data))):
        raise invalid("parquet", "negative index or non-finite value in the sparse columns",
                      column="indices")
    n_features = int(indices.max()) + 1 if indices.size else 1
    X = sp.csr_matrix((data, indices.astype(np.int32), indptr),
                      shape=(table.num_rows, n_features))
    if not X.has_sorted_indices:
        raise invalid("parquet", "indices must be sorted within each row", column="indices")
    return X


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


def class_counts(y: np.ndarray) -> dict[str, int]:
    """``{label: count}`` with labels rendered as they are stored (int, float or text)."""
    from app.services.storage import normalize_labels

    y, _ = normalize_labels(y)
    values, counts = np.unique(y, return_counts=True)
    return {str(v.item() if hasattr(v, "item") else v): int(c)
            for v, c in zip(values, counts, strict=True)}
