"""CSV text: a header row, one label column (numbers or text), numeric finite feature
columns."""

from __future__ import annotations

import csv
import io
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data.ingest.errors import first_true, invalid, over_limit
from app.services.data.ingest.files import CHUNK
from app.services.data.ingest.parsed import Parsed, check_classes
from app.services.data.ingest.text import BOM, NUM, NUM_RE, check_text, first_line

# the first line of a LIBSVM file (CSV's wrong-format check): "label idx:val ...", linear
_LIBSVM_FIRST_LINE = re.compile(rf"[ \t]*+{NUM}(?:[ \t]++\d++:{NUM})++\s*+", re.ASCII)


def parse_csv(path: Path, label_column: str) -> Parsed:
    """A header row, one label column (numbers or text), numeric finite feature columns.

    Two streaming passes: Python's C ``csv`` module reads the row structure (header, field
    counts, each row's line number), then pyarrow's streaming reader parses the numbers
    block by block into a preallocated matrix; labels are kept as codes into their distinct
    texts. Peak memory: the arrays plus a few blocks."""
    longest = check_text(path, "csv").longest
    start, offset = _csv_start(path)
    first = first_line(path, start).decode("utf-8")
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
    check_classes(y, "csv")
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
        counts = Counter(header)  # linear: a 100,000-column header with a late repeat
        dup = next(h for h in header if counts[h] > 1)
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
                self.first_null[j] = r0 + first_true(pc.is_null(col))
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
                value = float(self.X[self.first_bad[j], j])  # "inf", not "np.float64(inf)"
                line = int(lines[self.first_bad[j]])
                raise invalid("csv", f"line {line}: column {name!r} value {value!r} is not "
                                     "finite", line=line, column=name, value=str(value))


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
                if name == label or NUM_RE.fullmatch(value) or value.lower() in _NON_FINITE:
                    continue
                msg = "is empty" if not value else f"value {cell!r} is not a number"
                raise invalid("csv", f"line {line}: column {name!r} {msg}", line=line,
                              column=name, value=cell)
