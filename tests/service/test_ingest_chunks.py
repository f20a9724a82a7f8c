"""The text parsers read the file in line-cut chunks (``ingest.text.PARSE_CHUNK``): a tiny chunk
size gives the same arrays as the default one, and a problem in a later chunk names the
line (and byte offset) of the whole file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from app.core.problems import ProblemError
from app.services.data import ingest
from app.services.data.ingest import text as ingest_text

TINY = (1, 7, 64)  # bytes per chunk: shorter than a line, a few lines


def _libsvm_lines(n: int = 200) -> list[str]:
    rng = np.random.default_rng(1)
    lines = []
    for i in range(n):
        idx = np.sort(rng.choice(40, size=int(rng.integers(0, 6)), replace=False)) + 1
        lines.append(f"{i % 3} " + " ".join(f"{j}:{rng.normal():.4g}" for j in idx))
    lines[50] = "# a comment line"
    lines[51] = ""
    return lines


def _csv_lines(n: int = 200, text_labels: bool = False) -> list[str]:
    rng = np.random.default_rng(2)
    rows = ["a,b,label,c"]
    for i in range(n):
        label = (" cat", "dog ", "ant")[i % 3] if text_labels else str(i % 2)
        rows.append(f"{rng.normal():.5g},{int(rng.integers(0, 9))},{label},{rng.random():.3f}")
    return rows


def _write(tmp_path: Path, content: bytes, name: str = "f") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _parse_with(monkeypatch: pytest.MonkeyPatch, path: Path, fmt: str,
                chunk: int) -> ingest.Parsed:
    monkeypatch.setattr(ingest_text, "PARSE_CHUNK", chunk)
    return ingest.parse_file(path, fmt, "label")


def _problem(monkeypatch: pytest.MonkeyPatch, path: Path, fmt: str,
             chunk: int) -> dict[str, object]:
    with pytest.raises(ProblemError) as info:
        _parse_with(monkeypatch, path, fmt, chunk)
    return info.value.body()


def _same_csr(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    assert a.shape == b.shape
    for name in ("data", "indices", "indptr"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


def test_libsvm_tiny_chunks_give_the_same_matrix(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    content = ("\ufeff" + "\n".join(_libsvm_lines()) + "\n").encode()
    path = _write(tmp_path, content)
    ref = _parse_with(monkeypatch, path, "libsvm", ingest_text.PARSE_CHUNK)
    X0, y0 = load_svmlight_file(io.BytesIO(content[3:]), zero_based=False, dtype=np.float64)
    _same_csr(ref.X, sp.csr_matrix(X0))
    assert np.array_equal(ref.y, y0)
    for chunk in TINY:
        got = _parse_with(monkeypatch, path, "libsvm", chunk)
        _same_csr(got.X, ref.X)
        assert got.y.dtype == ref.y.dtype and np.array_equal(got.y, ref.y)


@pytest.mark.parametrize(("bad_line", "field", "value"), [
    ("1 3:1 2:4", "index", "2:4"), ("0 5:abc", "value", "5:abc"), ("1 4:nan", "value", "4:nan"),
    ("1 qid:2 3:1", "index", "qid:2")])
def test_libsvm_problem_in_a_later_chunk_names_the_global_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_line: str, field: str,
        value: str) -> None:
    lines = _libsvm_lines()
    lines[149] = bad_line
    path = _write(tmp_path, ("\n".join(lines) + "\n").encode())
    for chunk in (ingest_text.PARSE_CHUNK, *TINY):
        body = _problem(monkeypatch, path, "libsvm", chunk)
        assert (body["line"], body["field"], body["value"]) == (150, field, value), chunk
        assert "line 150:" in body["detail"]


@pytest.mark.parametrize("fmt", ["libsvm", "csv"])
@pytest.mark.parametrize("junk", [b"\x00", b"\xff", b"\xe9t\xe9"])
def test_binary_byte_in_a_later_chunk_names_line_and_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, junk: bytes) -> None:
    lines = _libsvm_lines() if fmt == "libsvm" else _csv_lines()
    head = ("\n".join(lines[:120]) + "\n").encode()
    content = head + b"1" + junk + b" 2:1\n" + "é\n".join(lines[120:]).encode()
    path = _write(tmp_path, content)
    for chunk in (ingest_text.PARSE_CHUNK, *TINY):
        body = _problem(monkeypatch, path, fmt, chunk)
        assert body["type"].endswith("/binary-content")
        assert (body["line"], body["offset"]) == (121, len(head) + 1), chunk


def test_csv_tiny_chunks_give_the_same_arrays(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for text_labels in (False, True):
        rows = _csv_lines(text_labels=text_labels)
        rows.insert(60, "")  # a blank line inside the data
        rows.insert(90, '1.5,"2",1,0.25')
        content = ("\ufeff\n\r\n" + "\r\n".join(rows) + "\r\n").encode()
        path = _write(tmp_path, content)
        ref = _parse_with(monkeypatch, path, "csv", ingest_text.PARSE_CHUNK)
        assert ref.X.shape == (201, 3) and ref.feature_names == ["a", "b", "c"]
        assert ref.X[88].tolist() == [1.5, 2.0, 0.25]
        if text_labels:
            assert sorted(set(ref.y.tolist()) - {"1"}) == ["ant", "cat", "dog"]
        for chunk in TINY:
            got = _parse_with(monkeypatch, path, "csv", chunk)
            assert got.X.dtype == ref.X.dtype and np.array_equal(got.X, ref.X)
            assert got.y.dtype == ref.y.dtype and np.array_equal(got.y, ref.y)
            assert got.feature_names == ref.feature_names


@pytest.mark.parametrize(("bad_row", "expect"), [
    ("1,x7,0,3", {"column": "b", "value": "x7"}),
    ("1,2,0", {"field": "row", "value": "1,2,0"}),
    ("1,,0,3", {"column": "b", "value": ""}),
    ("1,2,0,inf", {"column": "c", "value": "inf"}),
    ("1,2, ,3", {"column": "label", "value": ""}),
    ("1,2,1e999,3", {"column": "label", "value": "1e999"})])
def test_csv_problem_in_a_later_chunk_names_the_global_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad_row: str,
        expect: dict[str, str]) -> None:
    rows = _csv_lines()
    rows[150] = bad_row  # blank lines before the header shift it: line 153
    path = _write(tmp_path, ("\n\n" + "\n".join(rows) + "\n").encode())
    for chunk in (ingest_text.PARSE_CHUNK, *TINY):
        body = _problem(monkeypatch, path, "csv", chunk)
        assert body["line"] == 153 and "line 153:" in body["detail"], (chunk, body)
        assert {k: body[k] for k in expect} == expect, chunk


def test_csv_first_bad_column_wins_over_an_earlier_row(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """As when the whole file was one table: column a's problem (row 180) is reported
    before column c's (row 20), whichever chunk each is in."""
    rows = _csv_lines()
    rows[20] = "1,2,0,nan"
    rows[180] = "inf,2,0,3"
    path = _write(tmp_path, ("\n".join(rows) + "\n").encode())
    for chunk in (ingest_text.PARSE_CHUNK, *TINY):
        body = _problem(monkeypatch, path, "csv", chunk)
        assert (body["line"], body["column"]) == (181, "a"), chunk
