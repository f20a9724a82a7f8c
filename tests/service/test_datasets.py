"""Dataset uploads through the in-process API (``api``) on the real Postgres and real
files; the size limit and unwritable storage run on their own uvicorn (``start_api``).

Happy paths use the shared LIBSVM data (svmguide1, heart_scale) in libsvm, csv, parquet and
xz form with exact shapes and class counts; every hostile upload must get its 4xx problem
with line/field details and leave nothing behind (no row, no dataset files, no temp files).
"""

from __future__ import annotations

import io
import lzma
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sqlalchemy import func, select

from app.core.db import session_scope
from app.core.orm import Dataset
from app.services.filestore.storage import load_dataset, read_meta

HEART = {"n_rows": 270, "n_features": 13, "classes": {"-1": 150, "1": 120}}
SVMGUIDE1 = {"n_rows": 3089, "n_features": 4, "classes": {"0": 1089, "1": 2000}}


@pytest.fixture(scope="module")
def heart_text(datasets_dir: Path) -> bytes:
    return lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())


@pytest.fixture(scope="module")
def heart_arrays(heart_text: bytes) -> tuple[np.ndarray, np.ndarray]:
    X, y = load_svmlight_file(io.BytesIO(heart_text), zero_based=False)
    return X.toarray(), y.astype(np.int64)


def _csv_bytes(X: np.ndarray, y: np.ndarray, label: str = "label") -> bytes:
    cols = [f"x{j + 1}" for j in range(X.shape[1])]
    lines = [",".join([*cols[:3], label, *cols[3:]])]
    for row, lab in zip(X, y, strict=True):
        vals = [repr(float(v)) for v in row]
        lines.append(",".join([*vals[:3], str(lab), *vals[3:]]))
    return ("\n".join(lines) + "\n").encode()


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _upload(client: httpx.Client, filename: str, data: bytes, **fields: str) -> httpx.Response:
    return client.post("/datasets", files={"file": (filename, data)}, data=fields)


def _check_summary(body: dict, expected: dict, fmt: str) -> None:
    assert body["format"] == fmt
    for k, v in expected.items():
        assert body[k] == v, (k, body[k], v)


def _stored(body: dict, data_dir: Path) -> tuple[np.ndarray | sp.csr_matrix, np.ndarray]:
    return load_dataset(data_dir / "datasets" / body["id"])


def test_upload_svmguide1_libsvm(api: httpx.Client, datasets_dir: Path,
                                 stack_env: dict[str, str]) -> None:
    raw = lzma.decompress((datasets_dir / "svmguide1.xz").read_bytes())
    r = _upload(api, "svmguide1.libsvm", raw)
    assert r.status_code == 201, r.text
    body = r.json()
    _check_summary(body, SVMGUIDE1, "libsvm")
    assert body["name"] == "svmguide1.libsvm"
    assert r.headers["location"] == f"/datasets/{body['id']}"
    X, y = _stored(body, Path(stack_env["SODM_DATA_DIR"]))
    X0, y0 = load_svmlight_file(io.BytesIO(raw), zero_based=False)
    np.testing.assert_array_equal(X, X0.toarray())
    np.testing.assert_array_equal(y, y0.astype(np.int64))
    assert y.dtype == np.int64
    meta = read_meta(Path(stack_env["SODM_DATA_DIR"]) / "datasets" / body["id"])
    assert meta["layout"] == "dense" and meta["label_type"] == "int"
    # the stored Parquet is the contract form: row_id, label, f0..f3
    table = pq.read_table(Path(stack_env["SODM_DATA_DIR"]) / "datasets" / body["id"]
                          / "data.parquet")
    assert table.column_names == ["row_id", "label", "f0", "f1", "f2", "f3"]
    assert table.column("row_id").to_pylist() == list(range(3089))
    assert api.get(f"/datasets/{body['id']}").json() == body


def test_upload_heart_scale_xz_compressed(api: httpx.Client, datasets_dir: Path,
                                          heart_arrays, stack_env: dict[str, str]) -> None:
    r = _upload(api, "heart_scale.xz", (datasets_dir / "heart_scale.xz").read_bytes(),
                format="libsvm", name="heart")
    assert r.status_code == 201, r.text
    body = r.json()
    _check_summary(body, HEART, "libsvm")
    assert body["name"] == "heart"
    X, y = _stored(body, Path(stack_env["SODM_DATA_DIR"]))
    np.testing.assert_array_equal(X, heart_arrays[0])
    np.testing.assert_array_equal(y, heart_arrays[1])


def test_upload_heart_scale_csv_and_gzip(api: httpx.Client, heart_arrays,
                                         stack_env: dict[str, str]) -> None:
    import gzip

    data = _csv_bytes(*heart_arrays, label="target")
    for name, payload in (("heart.csv", data), ("heart.csv.gz", gzip.compress(data))):
        r = _upload(api, name, payload, label_column="target")
        assert r.status_code == 201, r.text
        body = r.json()
        _check_summary(body, HEART, "csv")
        X, y = _stored(body, Path(stack_env["SODM_DATA_DIR"]))
        np.testing.assert_array_equal(X, heart_arrays[0])  # column order kept, label removed
        np.testing.assert_array_equal(y, heart_arrays[1])


def test_upload_heart_scale_parquet(api: httpx.Client, heart_arrays,
                                    stack_env: dict[str, str]) -> None:
    X0, y0 = heart_arrays
    cols = {f"c{j}": X0[:, j] for j in range(X0.shape[1])}
    table = pa.table({"label": y0, **cols})
    r = _upload(api, "heart.parquet", _parquet_bytes(table))
    assert r.status_code == 201, r.text
    body = r.json()
    _check_summary(body, HEART, "parquet")
    X, y = _stored(body, Path(stack_env["SODM_DATA_DIR"]))
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)


def test_parquet_wide_integers_and_large_lists_are_read(api: httpx.Client,
                                                        stack_env: dict[str, str]) -> None:
    """Integer features past 2**53 (int64, uint64) become the nearest double, as a CSV cell
    would; the sparse form also comes as large_list columns, rows that start lower than the
    last row ended included."""
    data_dir = Path(stack_env["SODM_DATA_DIR"])
    table = pa.table({"label": [0, 1], "a": pa.array([2**63 - 1, 1], pa.int64()),
                      "b": pa.array([2**64 - 1, 2], pa.uint64())})
    r = _upload(api, "wide.parquet", _parquet_bytes(table))
    assert r.status_code == 201, r.text
    X, _ = _stored(r.json(), data_dir)
    np.testing.assert_array_equal(X, [[2.0**63, 2.0**64], [1.0, 2.0]])
    lists = pa.table({"label": [0, 1, 0],
                      "indices": pa.array([[1, 4], [0], []], pa.large_list(pa.int64())),
                      "values": pa.array([[1.5, 2.5], [3.5], []], pa.large_list(pa.float32()))})
    r = _upload(api, "lists.parquet", _parquet_bytes(lists))
    assert r.status_code == 201, r.text
    assert r.json()["n_features"] == 5
    X, _ = _stored(r.json(), data_dir)
    dense = X.toarray() if sp.issparse(X) else X
    np.testing.assert_array_equal(dense, [[0, 1.5, 0, 0, 2.5], [3.5, 0, 0, 0, 0], [0] * 5])


def test_text_labels_and_sparse_layout(api: httpx.Client,
                                       stack_env: dict[str, str]) -> None:
    """CSV text labels keep their values; wide sparse LIBSVM is stored in the sparse form."""
    r = _upload(api, "t.csv", b"a,b,label\n1,2,cat\n3,4,dog\n5,6,cat\n")
    assert r.status_code == 201, r.text
    assert r.json()["classes"] == {"cat": 2, "dog": 1}
    _, y = _stored(r.json(), Path(stack_env["SODM_DATA_DIR"]))
    assert list(y) == ["cat", "dog", "cat"]
    rng = np.random.default_rng(0)
    lines = []
    for i in range(40):
        idx = np.sort(rng.choice(5000, size=10, replace=False)) + 1
        lines.append(f"{i % 2} " + " ".join(f"{j}:{rng.random():.6f}" for j in idx))
    lines.append("1 5000:1")
    text = "\n".join(lines).encode()
    r = _upload(api, "wide.svm", text)
    assert r.status_code == 201, r.text
    assert r.json()["layout"] == "sparse" and r.json()["n_features"] == 5000
    X, _ = _stored(r.json(), Path(stack_env["SODM_DATA_DIR"]))
    X0, _ = load_svmlight_file(io.BytesIO(text), zero_based=False, n_features=5000)
    assert sp.issparse(X)
    assert (X != X0).nnz == 0


@pytest.mark.parametrize(("name", "data", "classes"), [
    ("big.libsvm", b"1e19 1:0.1\n1e70 1:0.2\n-1 1:0.3\n9223372036854775808 1:0.4\n",
     {"1e+19": 1, "1e+70": 1, "-1.0": 1, "9.223372036854776e+18": 1}),
    ("big.csv", b"a,label\n0.1,1e19\n0.2,-9.3e18\n0.3,1e19\n",
     {"1e+19": 2, "-9.3e+18": 1}),
    ("big.parquet", _parquet_bytes(pa.table({"a": [0.1, 0.2, 0.3], "label": pa.array(
        [2.0 ** 63, -(2.0 ** 63), 1.0])})),
     {"9.223372036854776e+18": 1, "-9.223372036854776e+18": 1, "1.0": 1}),
    ("edge.csv", b"a,label\n0.1,-9223372036854775808\n0.2,1\n",  # -2**63 is an int64
     {"-9223372036854775808": 1, "1": 1}),
])
def test_integral_labels_past_int64_stay_distinct(api: httpx.Client, stack_env: dict[str, str],
                                                  name: str, data: bytes,
                                                  classes: dict[str, int]) -> None:
    """Integral labels past int64's range are float labels: as int64 they all became
    -9223372036854775808 (1e19 and 1e70 merged into one class, silently)."""
    r = _upload(api, name, data)
    assert r.status_code == 201, r.text
    assert r.json()["classes"] == classes
    _, y = _stored(r.json(), Path(stack_env["SODM_DATA_DIR"]))
    assert len(np.unique(y)) == len(classes)


def test_list_paginates_get_and_delete(api: httpx.Client, heart_text: bytes,
                                       stack_env: dict[str, str]) -> None:
    ids = [_upload(api, "h.libsvm", heart_text, name=f"page-{i}").json()["id"]
           for i in range(3)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.get("/datasets", params=params).json()
        assert len(page["items"]) <= 2
        seen += [d["id"] for d in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen))
    assert seen[:3] == ids[::-1]  # newest first
    assert api.get("/datasets", params={"cursor": "garbage!"}).status_code == 422
    target = ids[0]
    path = Path(stack_env["SODM_DATA_DIR"]) / "datasets" / target
    assert path.is_dir()
    r = api.delete(f"/datasets/{target}")
    assert r.status_code == 204 and r.content == b""
    assert not path.exists()
    assert api.get(f"/datasets/{target}").status_code == 404
    assert api.delete(f"/datasets/{target}").status_code == 404
    assert target not in [d["id"] for d in api.get("/datasets").json()["items"]]
    with session_scope() as s:
        assert s.get(Dataset, target).deleted_at is not None  # soft delete


# ---------------------------------------------------------------- hostile uploads

@pytest.fixture
def hostile(api_as: Callable[[str | None], httpx.Client],
            make_tenant: Callable[..., tuple[str, str]],
            stack_env: dict[str, str]) -> Iterator[tuple[httpx.Client, Callable[[], None]]]:
    """A client of a fresh tenant plus a check that nothing at all was stored."""
    tenant_id, key = make_tenant()
    data_dir = Path(stack_env["SODM_DATA_DIR"])

    def snapshot() -> tuple[set[str], set[str]]:
        ds = data_dir / "datasets"
        tmp = data_dir / "tmp"
        return (set(os.listdir(ds)) if ds.exists() else set(),
                set(os.listdir(tmp)) if tmp.exists() else set())

    before = snapshot()

    def nothing_stored() -> None:
        with session_scope() as s:
            n = s.scalar(select(func.count()).select_from(Dataset)
                         .where(Dataset.tenant_id == tenant_id))
        assert n == 0
        # nothing new (the data directory is shared with the rest of the session's tests)
        after = snapshot()
        assert after[0] - before[0] == set() and after[1] - before[1] == set()

    yield api_as(key), nothing_stored


PARQUET_OK = _parquet_bytes(pa.table({"label": [0, 1], "a": [1.0, 2.0]}))

HOSTILE = [
    # (id, file name, content, form fields, status, problem type, extensions expected)
    ("libsvm-malformed-token", "x.libsvm", b"1 1:0.5\n-1 2:0.1 junk\n", {}, 422,
     "invalid-libsvm", {"line": 2, "field": "token", "value": "junk"}),
    ("libsvm-zero-based", "x.libsvm", b"1 1:0.5\n-1 0:0.1 2:3\n", {}, 422, "invalid-libsvm",
     {"line": 2, "field": "index", "value": "0:0.1"}),
    ("libsvm-unsorted", "x.libsvm", b"1 1:0.5\n\n-1 3:1 2:3\n", {}, 422, "invalid-libsvm",
     {"line": 3, "field": "index", "value": "2:3"}),
    ("libsvm-duplicate", "x.libsvm", b"1 1:0.5 1:2\n-1 2:3\n", {}, 422, "invalid-libsvm",
     {"line": 1, "field": "index", "value": "1:2"}),
    ("libsvm-non-numeric", "x.libsvm", b"1 1:0.5\n-1 2:abc\n", {}, 422, "invalid-libsvm",
     {"line": 2, "field": "value", "value": "2:abc"}),
    ("libsvm-nan", "x.libsvm", b"1 1:0.5\n-1 2:nan\n", {}, 422, "invalid-libsvm",
     {"line": 2, "field": "value", "value": "2:nan"}),
    ("libsvm-inf", "x.libsvm", b"1 1:0.5\n-1 2:1\n1 1:-inf\n", {}, 422, "invalid-libsvm",
     {"line": 3, "field": "value"}),
    ("libsvm-bad-label", "x.libsvm", b"1 1:0.5\nyes 2:1\n", {}, 422, "invalid-libsvm",
     {"line": 2, "field": "label", "value": "yes"}),
    # digits outside ASCII: str.isdigit() takes the superscript, int() does not
    ("libsvm-superscript-index", "x.libsvm", "1 1:0.5\n-1 1:0.1 \u00b2:3\n".encode(), {},
     422, "invalid-libsvm", {"line": 2, "field": "index", "value": "\u00b2:3"}),
    ("libsvm-arabic-digit-label", "x.libsvm", "1 1:0.5\n\u0661 2:1\n".encode(), {}, 422,
     "invalid-libsvm", {"line": 2, "field": "label", "value": "\u0661"}),
    ("one-class", "x.libsvm", b"1 1:0.5\n1 2:1\n", {}, 422, "too-few-classes",
     {"classes": ["1"]}),
    ("empty-file", "x.libsvm", b"", {}, 422, "empty-dataset", {}),
    ("only-comments", "x.libsvm", b"# nothing\n\n", {}, 422, "empty-dataset", {}),
    ("binary-garbage", "x.libsvm", b"1 1:2\n\x00\x01\x02\xff\xfe garbage", {}, 422,
     "binary-content", {"line": 2}),
    ("parquet-declared-libsvm", "x.libsvm", PARQUET_OK, {}, 422, "wrong-format",
     {"declared": "libsvm", "detected": "parquet"}),
    ("libsvm-declared-parquet", "x.bin", b"1 1:2\n0 2:1\n", {"format": "parquet"}, 422,
     "wrong-format", {"declared": "parquet", "detected": "text"}),
    ("libsvm-declared-csv", "x.csv", b"1 1:2\n0 2:1\n", {}, 422, "wrong-format",
     {"declared": "csv", "detected": "libsvm"}),
    ("csv-declared-libsvm", "x.txt", b"a,b,label\n1,2,0\n", {}, 422, "wrong-format",
     {"declared": "libsvm", "detected": "csv"}),
    ("unknown-format", "x.dat", b"1 1:2\n0 2:1\n", {}, 422, "unknown-format",
     {"field": "format"}),
    ("csv-ragged", "x.csv", b"a,b,label\n1,2,0\n3,1\n5,6,1\n", {}, 422, "invalid-csv",
     {"line": 3, "field": "row", "value": "3,1"}),
    ("csv-missing-label", "x.csv", b"a,b,y\n1,2,0\n3,1,1\n", {}, 422, "missing-label-column",
     {"column": "label", "columns": ["a", "b", "y"]}),
    ("csv-non-numeric", "x.csv", b"a,b,label\n1,2,0\n3,x7,1\n", {}, 422, "invalid-csv",
     {"line": 3, "column": "b", "value": "x7"}),
    ("csv-leading-blank-lines", "x.csv", b"\n\na,b,label\n1,2,0\n3,1_0,1\n", {}, 422,
     "invalid-csv", {"line": 5, "column": "b", "value": "1_0"}),
    ("csv-arabic-digit", "x.csv", "a,b,label\n1,2,0\n3,\u0663,1\n".encode(), {}, 422,
     "invalid-csv", {"line": 3, "column": "b", "value": "\u0663"}),
    ("csv-nan", "x.csv", b"a,b,label\n1,2,0\n3,4,1\n5,NaN,0\n", {}, 422, "invalid-csv",
     {"line": 4, "column": "b"}),
    ("csv-empty-cell", "x.csv", b"a,b,label\n1,,0\n3,4,1\n", {}, 422, "invalid-csv",
     {"line": 2, "column": "b", "value": ""}),
    ("csv-one-class", "x.csv", b"a,label\n1,0\n2,0\n", {}, 422, "too-few-classes", {}),
    ("parquet-missing-label", "x.parquet",
     _parquet_bytes(pa.table({"y": [0, 1], "a": [1.0, 2.0]})), {}, 422,
     "missing-label-column", {"column": "label"}),
    ("parquet-non-numeric", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "a": ["u", "v"]})), {}, 422,
     "invalid-parquet", {"column": "a", "value": "u"}),
    ("parquet-inf", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "a": [1.0, float("inf")]})), {}, 422,
     "invalid-parquet", {"row": 2, "column": "a"}),
    ("parquet-null-label", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, None], "a": [1.0, 2.0]})), {}, 422,
     "invalid-parquet", {"row": 2, "column": "label"}),
    ("parquet-list-feature", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "a": [[1.0], [2.0]]})), {}, 422,
     "invalid-parquet", {"column": "a"}),
    ("parquet-struct-feature", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "a": [{"x": 1}, {"x": 2}]})), {}, 422,
     "invalid-parquet", {"column": "a"}),
    ("parquet-duplicate-column", "x.parquet",
     _parquet_bytes(pa.Table.from_arrays([pa.array([0, 1]), pa.array([1.0, 2.0]),
                                          pa.array([3.0, 4.0])], names=["label", "a", "a"])),
     {}, 422, "invalid-parquet", {"column": "a"}),
    ("parquet-duplicate-label", "x.parquet",
     _parquet_bytes(pa.Table.from_arrays([pa.array([0, 1]), pa.array([1.0, 2.0]),
                                          pa.array([0, 1])], names=["label", "a", "label"])),
     {}, 422, "invalid-parquet", {"column": "label"}),
    ("parquet-uint64-label", "x.parquet",
     _parquet_bytes(pa.table({"label": pa.array([1, 2**64 - 1], pa.uint64()),
                              "a": [1.0, 2.0]})), {}, 422, "invalid-parquet",
     {"row": 2, "column": "label", "value": str(2**64 - 1)}),
    ("parquet-sparse-float-indices", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "indices": [[0.5], [1.0]],
                              "values": [[1.0], [2.0]]})), {}, 422, "invalid-parquet",
     {"column": "indices"}),
    ("parquet-sparse-text-values", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "indices": [[0], [1]],
                              "values": [["x"], ["y"]]})), {}, 422, "invalid-parquet",
     {"column": "values"}),
    ("parquet-sparse-null-row", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "indices": [[0], None],
                              "values": [[1.0], None]})), {}, 422, "invalid-parquet",
     {"row": 2, "column": "indices"}),
    ("parquet-sparse-null-index", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "indices": [[0], [None]],
                              "values": [[1.0], [2.0]]})), {}, 422, "invalid-parquet",
     {"row": 2, "column": "indices"}),
    ("parquet-sparse-repeated-index", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1, 0], "indices": [[0, 3], [1, 1], [2]],
                              "values": [[1.0, 2.0], [2.0, 3.0], [4.0]]})), {}, 422,
     "invalid-parquet", {"row": 2, "column": "indices"}),
    ("parquet-sparse-lengths", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1], "indices": [[0], [1, 2]],
                              "values": [[1.0], [2.0]]})), {}, 422, "invalid-parquet",
     {"row": 2, "column": "values"}),
    ("parquet-sparse-uint64-index", "x.parquet",
     _parquet_bytes(pa.table({"label": [0, 1],
                              "indices": pa.array([[0], [2**64 - 1]], pa.list_(pa.uint64())),
                              "values": [[1.0], [2.0]]})), {}, 413, "dataset-over-limit",
     {"column": "indices"}),
    ("corrupt-xz", "x.libsvm.xz", lzma.compress(b"1 1:2\n0 2:1\n" * 50)[:-20], {}, 422,
     "corrupt-compression", {}),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_upload_is_refused_and_leaves_nothing(hostile, case) -> None:
    client, nothing_stored = hostile
    _, name, content, fields, status, ptype, ext = case
    r = _upload(client, name, content, **fields)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["type"] == f"https://sodm.dev/problems/{ptype}"
    assert body["status"] == status and body["title"] and body["detail"]
    assert "np.float64" not in body["detail"]  # values echoed as written, not as reprs
    for k, v in ext.items():
        assert body[k] == v, (k, body)
    if "line" in ext:
        assert f"line {ext['line']}" in body["detail"]
    nothing_stored()


def test_missing_file_part_and_wrong_media_type(hostile) -> None:
    client, nothing_stored = hostile
    r = client.post("/datasets", data={"format": "csv"}, files={"other": ("a", b"x")})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "file"
    r = client.post("/datasets", json={"file": "1 1:2"})
    assert r.status_code == 415
    assert r.json()["type"].endswith("/unsupported-media-type")
    nothing_stored()


def test_over_the_size_limit_413_and_no_temp_files(start_api, make_tenant,
                                                   stack_env: dict[str, str]) -> None:
    server = start_api(SODM_MAX_UPLOAD_BYTES="2000", SODM_MAX_DECOMPRESSED_BYTES="20000")
    tenant_id, key = make_tenant()
    tmp = Path(stack_env["SODM_DATA_DIR"]) / "tmp"
    before = set(os.listdir(tmp)) if tmp.exists() else set()
    big = b"".join(f"{i % 2} 1:{i}.5 2:0.25\n".encode() for i in range(400))  # ~7 KB
    small = big[:1500]
    small = small[: small.rfind(b"\n") + 1]
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        r = _upload(c, "big.libsvm", big)
        assert r.status_code == 413
        assert r.json()["type"].endswith("/upload-too-large")
        assert r.json()["limit_bytes"] == 2000
        # without a Content-Length the limit is enforced while streaming
        boundary = "sodmtestboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"big.libsvm\"\r\n\r\n").encode() + big + \
               f"\r\n--{boundary}--\r\n".encode()

        def chunks() -> Iterator[bytes]:
            for i in range(0, len(body), 512):
                yield body[i:i + 512]

        r = c.post("/datasets", content=chunks(),
                   headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert r.status_code == 413, r.text
        # within the limit: accepted
        r = _upload(c, "small.libsvm", small)
        assert r.status_code == 201, r.text
        # a decompression bomb: small compressed, large expanded
        bomb = lzma.compress(b"1 1:0\n" * 10_000)
        assert len(bomb) < 2000
        r = _upload(c, "bomb.libsvm.xz", bomb)
        assert r.status_code == 413
        assert r.json()["title"] == "Decompressed upload too large"
    after = set(os.listdir(tmp)) if tmp.exists() else set()
    assert after == before  # no temp file survives any of them
    with session_scope() as s:
        n = s.scalar(select(func.count()).select_from(Dataset)
                     .where(Dataset.tenant_id == tenant_id))
    assert n == 1


def test_unwritable_storage_is_507(start_api, make_tenant, heart_text: bytes) -> None:
    # /sys refuses new directories (EPERM even for root): an unwritable data store
    server = start_api(SODM_DATA_DIR="/sys/sodm-unwritable-store")
    tenant_id, key = make_tenant()
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        r = _upload(c, "h.libsvm", heart_text)
    assert r.status_code == 507
    assert r.json()["type"].endswith("/insufficient-storage")
    assert "/sys" not in r.text
    with session_scope() as s:
        assert s.scalar(select(func.count()).select_from(Dataset)
                        .where(Dataset.tenant_id == tenant_id)) == 0


def test_delete_refused_while_a_job_uses_the_dataset(api: httpx.Client, heart_text: bytes,
                                                     tenant: tuple[str, str]) -> None:
    from app.core.orm import Job

    ds = _upload(api, "h.libsvm", heart_text).json()["id"]
    with session_scope() as s:  # a queued job row, as POST /train would leave it
        job = Job(tenant_id=tenant[0], dataset_id=ds, algorithm="odm", state="QUEUED")
        s.add(job)
        s.flush()
        job_id = job.id
    try:
        r = api.delete(f"/datasets/{ds}")
        assert r.status_code == 409
        assert r.json()["type"].endswith("/dataset-in-use") and r.json()["job_id"] == job_id
        assert api.get(f"/datasets/{ds}").status_code == 200
        with session_scope() as s:
            s.get(Job, job_id).state = "CANCELLED"
        assert api.delete(f"/datasets/{ds}").status_code == 204
    finally:
        with session_scope() as s:
            s.get(Job, job_id).state = "CANCELLED"


def test_n_features_widens_libsvm(api: httpx.Client, heart_text: bytes, heart_arrays,
                                  stack_env: dict[str, str]) -> None:
    """A test split whose largest index is below the training width (a9a.t) can be padded."""
    r = _upload(api, "h.libsvm", heart_text, n_features="20")
    assert r.status_code == 201, r.text
    assert r.json()["n_features"] == 20
    X, _ = _stored(r.json(), Path(stack_env["SODM_DATA_DIR"]))
    np.testing.assert_array_equal(X[:, :13], heart_arrays[0])
    assert not X[:, 13:].any()
    for value, ptype in (("5", "invalid-n-features"), ("abc", "validation-error"),
                         ("\u00b2", "validation-error")):
        r = _upload(api, "h.libsvm", heart_text, n_features=value)
        assert r.status_code == 422
        assert r.json()["type"].endswith(ptype)
    r = _upload(api, "x.csv", b"a,label\n1,0\n2,1\n", n_features="3")
    assert r.status_code == 422 and r.json()["field"] == "n_features"


def _until_settled(client: httpx.Client, dataset_id: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/datasets/{dataset_id}").json()
        if body["state"] != "parsing":
            return body
        time.sleep(0.1)
    raise AssertionError(f"dataset {dataset_id} still parsing after {timeout} s")


def test_upload_without_waiting_is_202_then_ready(api: httpx.Client, heart_text: bytes) -> None:
    """``?wait=0``: 202 with state parsing and the Location; the row turns ready by itself."""
    r = api.post("/datasets?wait=0", files={"file": ("h.libsvm", heart_text)},
                 data={"format": "libsvm"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["state"] == "parsing" and body["problem"] is None
    assert r.headers["location"] == f"/datasets/{body['id']}"
    done = _until_settled(api, body["id"])
    assert done["state"] == "ready" and done["problem"] is None
    _check_summary(done, HEART, "libsvm")
    listed = {d["id"]: d for d in api.get("/datasets").json()["items"]}
    assert listed[body["id"]]["state"] == "ready"
    assert api.delete(f"/datasets/{body['id']}").status_code == 204


def test_refused_after_202_keeps_the_failed_row_with_its_problem(
        api: httpx.Client, heart_text: bytes, stack_env: dict[str, str]) -> None:
    """A refusal that comes after the 202 stays on the row (state failed, the problem naming
    the line and field); training on it or predicting over it is a 409; DELETE removes it."""
    bad = heart_text + b"1 3:1 2:1\n"  # unsorted indices on the last line
    r = api.post("/datasets?wait=0", files={"file": ("bad.libsvm", bad)},
                 data={"format": "libsvm"})
    assert r.status_code == 202, r.text
    done = _until_settled(api, r.json()["id"])
    assert done["state"] == "failed"
    problem = done["problem"]
    assert problem["status"] == 422 and problem["type"].endswith("/invalid-libsvm")
    assert problem["line"] == 271 and problem["field"] == "index", problem
    assert not (Path(stack_env["SODM_DATA_DIR"]) / "datasets" / done["id"]).exists()
    r = api.post("/train", json={"dataset_id": done["id"], "algorithm": "sodm"})
    assert r.status_code == 409, r.text
    assert r.json()["type"].endswith("/dataset-not-ready") and r.json()["state"] == "failed"
    assert api.delete(f"/datasets/{done['id']}").status_code == 204


def test_training_on_a_parsing_dataset_is_409(api: httpx.Client, tenant: tuple[str, str],
                                              private_queue: str) -> None:
    """A row still parsing (as ``POST /datasets`` leaves it before the child ends): POST /train
    and POST /predictions answer 409 ``dataset-not-ready`` naming the state."""
    from app.core.orm import Tenant
    from app.services.data.dataset_catalog import begin_dataset

    with session_scope() as s:
        row = begin_dataset(s, s.get(Tenant, tenant[0]), filename="p.libsvm", fmt="libsvm",
                            name=None, sha256="", size_bytes=1)
    r = api.post("/train", json={"dataset_id": row.id, "algorithm": "sodm"})
    assert r.status_code == 409, r.text
    assert r.json()["type"].endswith("/dataset-not-ready") and r.json()["state"] == "parsing"
    assert r.json()["field"] == "dataset_id"
    r = api.post("/predictions", json={"dataset_id": row.id, "model": "nothing@champion"})
    assert r.status_code in (404, 409), r.text  # the model is resolved first
    assert api.get(f"/datasets/{row.id}").json()["state"] == "parsing"
    assert api.delete(f"/datasets/{row.id}").status_code == 204


def test_a_parse_whose_owner_is_gone_is_failed(api: httpx.Client,
                                               tenant: tuple[str, str]) -> None:
    """A row left parsing is failed when read (``ingest-interrupted``) once its owner is
    gone: at once when the owner was a process of this machine that no longer exists (or
    whose pid now belongs to another process), else when its heartbeat is older than
    ``STALE_SECONDS`` on the database's clock; a live owner keeps it parsing."""
    from sqlalchemy import text

    from app.core.orm import Tenant
    from app.services.data import process_owner
    from app.services.data.dataset_catalog import STALE_SECONDS, begin_dataset

    def row() -> str:
        with session_scope() as s:
            return begin_dataset(s, s.get(Tenant, tenant[0]), filename="p.libsvm",
                                 fmt="libsvm", name=None, sha256="", size_bytes=1).id

    def set_owner(dataset_id: str, owner: str, age: float) -> None:
        with session_scope() as s:
            s.execute(text("update datasets set ingest_owner = :o, heartbeat_at = now() - "
                           "make_interval(secs => :a) where id = :i"),
                      {"o": owner, "a": age, "i": dataset_id})

    def state(dataset_id: str) -> dict:
        return api.get(f"/datasets/{dataset_id}").json()

    me = process_owner.me()
    assert process_owner.alive(me.token) is True
    live, foreign, recycled, vanished = row(), row(), row(), row()
    set_owner(live, me.token, 10 * STALE_SECONDS)  # alive here: its heartbeat is moot
    assert state(live)["state"] == "parsing"
    other_host = f"{'f' * 32}.{me.pidns}.{me.pid}.{me.start}"
    assert process_owner.alive(other_host) is None
    set_owner(foreign, other_host, STALE_SECONDS - 10)
    assert state(foreign)["state"] == "parsing"
    set_owner(foreign, other_host, STALE_SECONDS + 5)
    body = state(foreign)
    assert body["state"] == "failed" and body["stored_bytes"] == 0, body
    assert body["problem"]["type"].endswith("/ingest-interrupted")
    # dead on this machine: failed at once, whatever the heartbeat says
    set_owner(recycled, f"{me.boot}.{me.pidns}.{me.pid}.{int(me.start) + 1}", 0)
    set_owner(vanished, f"{me.boot}.{me.pidns}.{2**31 - 1}.1", 0)
    for dataset_id in (recycled, vanished):
        assert state(dataset_id)["state"] == "failed"
    for dataset_id in (live, foreign, recycled, vanished):
        assert api.delete(f"/datasets/{dataset_id}").status_code == 204
