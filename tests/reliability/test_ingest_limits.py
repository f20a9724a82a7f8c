"""Issue 14, part 1: ingest that cannot stall or explode.

A hostile-upload corpus grown by families (digit runs, long lines, compression and Parquet
bombs, huge indices, class counts, rows, wide headers, dense cells) against an API process
with small caps, and the kernel limits of the parsing child (CPU time, memory). Each upload
is refused with a 4xx problem naming the cap (and the line where there is one) within a bound
proportional to its size, nothing is kept, and while it runs ``/livez`` and another
tenant's GET answer within 1 s (a probe thread measures them)."""

from __future__ import annotations

import gzip
import io
import lzma
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.reliability.conftest import one
from tests.reliability.probe import Probe

CAPS = {
    "SODM_LIMIT_LINE_BYTES": "65536",
    "SODM_LIMIT_TOKEN_BYTES": "1024",
    "SODM_LIMIT_ROWS": "5000",
    "SODM_LIMIT_FEATURES": "1000",
    "SODM_LIMIT_CLASSES": "50",
    "SODM_LIMIT_DENSE_CELLS": "200000",
    "SODM_MAX_DECOMPRESSED_BYTES": str(8 << 20),
}


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _lines(n: int, make: Callable[[int], str]) -> bytes:
    return "".join(make(i) for i in range(n)).encode()


# family -> (file name, content, form, status, the problem's expected members)
CORPUS: dict[str, tuple[str, bytes, dict[str, str], int, dict[str, Any]]] = {
    # digit runs over the token cap, in every place a token can be
    "digits-label": ("a.libsvm", b"1 1:1\n" + b"7" * 5000 + b" 1:2\n", {}, 413,
                     {"line": 2, "field": "label", "cap": "token bytes"}),
    "digits-value": ("a.libsvm", b"1 1:1\n-1 1:" + b"7" * 5000 + b"\n", {}, 413,
                     {"line": 2, "field": "value", "cap": "token bytes"}),
    "digits-index": ("a.libsvm", b"1 1:1\n-1 " + b"7" * 5000 + b":1\n", {}, 413,
                     {"line": 2, "field": "index", "cap": "token bytes"}),
    "digits-csv-cell": ("a.csv", b"x,label\n1,1\n" + b"7" * 5000 + b",2\n", {}, 413,
                        {"line": 3, "field": "cell", "cap": "token bytes"}),
    "digits-csv-header": ("a.csv", b"x" + b"7" * 5000 + b",label\n1,1\n", {}, 413,
                          {"line": 1, "field": "header", "cap": "token bytes"}),
    # a line over the line cap made of short tokens
    "long-line-libsvm": ("a.libsvm", b"1 1:1\n-1 " + b" ".join(
        f"{j}:1".encode() for j in range(1, 12_000)) + b"\n", {}, 413,
                         {"line": 2, "field": "line", "cap": "line bytes"}),
    "long-line-csv": ("a.csv", b"x,label\n" + b"1," * 40_000 + b"1\n", {}, 413,
                      {"line": 2, "field": "line", "cap": "line bytes"}),
    # bombs: a few KB that expand past SODM_MAX_DECOMPRESSED_BYTES (8 MiB here)
    "bomb-gzip": ("a.libsvm.gz", gzip.compress(b"1 1:0\n" * (3 << 20), 9), {}, 413,
                  {"type": "upload-too-large"}),
    "bomb-xz": ("a.libsvm.xz", lzma.compress(b"1 1:0\n" * (3 << 20)), {}, 413,
                {"type": "upload-too-large"}),
    "bomb-parquet": ("a.parquet", _parquet(pa.table(
        {"label": pa.array(np.arange(4000) % 2), **{
            f"f{j}": pa.array(np.zeros(4000)) for j in range(400)}})), {}, 413,
                     {"cap": "uncompressed bytes"}),
    # two 100 KB label strings, dictionary-encoded over 5,000 rows (500 MB decoded)
    "parquet-label-strings": ("a.parquet", _parquet(pa.table(
        {"label": pa.array(["a" * 100_000, "b" * 100_000] * 2500).dictionary_encode(),
         "f0": pa.array(np.zeros(5000))})), {}, 413,
                              {"cap": "token bytes", "field": "label", "column": "label"}),
    "parquet-rows": ("a.parquet", _parquet(pa.table(
        {"label": pa.array(np.arange(6000) % 2), "f0": pa.array(np.zeros(6000))})), {}, 413,
                     {"cap": "rows", "value": 6000}),
    # huge indices, class counts, rows, widths
    "huge-index": ("a.libsvm", b"1 1:1\n-1 9999999999:1\n", {}, 413,
                   {"cap": "features", "line": 2, "field": "index"}),
    "wide-sparse": ("a.libsvm", b"1 1:1\n-1 2000000:1\n", {}, 413,
                    {"cap": "features", "value": 2_000_000}),
    "classes": ("a.libsvm", _lines(120, lambda i: f"{i % 60} 1:{i}\n"), {}, 413,
                {"cap": "classes", "value": 60}),
    "rows": ("a.libsvm", _lines(5001, lambda i: f"{i % 2} 1:{i}\n"), {}, 413,
             {"cap": "rows", "value": 5001}),
    "csv-header-width": ("a.csv", (",".join(f"c{j}" for j in range(1200)) + ",label\n"
                                   + ",".join("1" for _ in range(1201)) + "\n").encode(), {},
                         413, {"cap": "features", "line": 1}),
    "dense-cells": ("a.csv", (",".join(f"c{j}" for j in range(60)) + ",label\n" + "".join(
        ",".join(["1"] * 60) + f",{i % 2}\n" for i in range(4000))).encode(), {}, 413,
                    {"cap": "dense cells (rows x features)", "value": 240_000}),
}


def _warmed(url: str, make_tenant) -> str:
    """The server once its parsing forkserver is up (a first upload waits for it to import
    the parsers: seconds, minutes on a loaded machine): the bounds measure the parse."""
    _, key = make_tenant()
    with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {key}"}
                      ) as c:
        r = c.post("/datasets", files={"file": ("w.libsvm", b"1 1:1\n-1 1:2\n")})
        assert r.status_code == 201, r.text
    return url


@pytest.fixture(scope="module")
def capped(start_api_module, make_tenant) -> str:
    return _warmed(start_api_module(**CAPS).url, make_tenant)


@pytest.fixture
def tenant_client(capped: str, make_tenant) -> Any:
    tenant_id, key = make_tenant()
    with httpx.Client(base_url=capped, timeout=600,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        yield c, tenant_id


def _refused_while_the_api_answers(base_url: str, client: httpx.Client, make_tenant,
                                   name: str, content: bytes, bound: float
                                   ) -> tuple[dict[str, Any], float]:
    _, other_key = make_tenant()
    with Probe(base_url, other_key) as probe:
        t0 = time.perf_counter()
        r = client.post("/datasets", files={"file": (name, content)})
        elapsed = time.perf_counter() - t0
    assert 400 <= r.status_code < 500, r.text[:2000]
    assert r.headers["content-type"].startswith("application/problem+json")
    assert elapsed < bound, (elapsed, bound)
    probe.check(1.0)
    return r.json() | {"_status": r.status_code}, elapsed


@pytest.mark.parametrize("family", sorted(CORPUS))
def test_hostile_corpus_is_refused_within_bounds(capped, tenant_client, make_tenant, db,
                                                 family: str) -> None:
    """Each family: its 4xx naming the cap, the value and the line where there is one, in
    at most 30 s + 2 s per MB of (expanded) input, nothing kept, the API answering."""
    client, tenant_id = tenant_client
    name, content, _, status, expected = CORPUS[family]
    megabytes = max(len(content), 8 << 20 if "bomb" in family else 0) / 1e6
    problem, _ = _refused_while_the_api_answers(capped, client, make_tenant, name, content,
                                                30 + 2 * megabytes)
    assert problem["_status"] == status, problem
    for key, value in expected.items():
        got = problem[key]
        assert (got.endswith("/" + value) if key == "type" else got == value), (key, problem)
    if problem.get("cap"):
        assert problem["setting"].startswith("SODM_") and problem["limit"] < problem["value"]
    assert len(str(problem)) < 4096
    assert one(db, "select count(*) from datasets where tenant_id = :t", t=tenant_id) == 0


def _expensive_upload() -> bytes:
    """About 120 MB of valid LIBSVM lines, gzip-compressed to a few hundred KB."""
    line = b"1 1:0.5 2:0.25 3:1 4:0.125 5:2 6:0.75\n-1 1:0.25 2:0.5 3:2 4:1 5:0.5 6:1.5\n"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6) as gz:
        block = line * 20_000
        for _ in range(120_000_000 // len(block)):
            gz.write(block)
    return buf.getvalue()


@pytest.mark.parametrize(("env", "ptype"), [
    ({"SODM_INGEST_CPU_SECONDS": "1"}, "ingest-cpu-limit"),
    ({"SODM_INGEST_MEMORY_BYTES": str(64 << 20)}, "ingest-memory-limit"),
])
def test_the_parse_runs_under_cpu_and_memory_limits(start_api, make_tenant, db, stack_env,
                                                    env: dict[str, str], ptype: str) -> None:
    """A valid upload too costly for the child's limits (120 MB of lines from a small gzip):
    the kernel stops the child (SIGXCPU) or an allocation fails (RLIMIT_AS), the answer is
    413 naming the limit, nothing is kept, and the API answered throughout."""
    server = start_api(**env)
    _warmed(server.url, make_tenant)
    tenant_id, key = make_tenant()
    content = _expensive_upload()
    with httpx.Client(base_url=server.url, timeout=600,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        problem, _ = _refused_while_the_api_answers(server.url, c, make_tenant, "big.libsvm.gz",
                                                    content, 30 + 2 * 120)
    assert problem["_status"] == 413 and problem["type"].endswith("/" + ptype), problem
    assert ("limit_seconds" in problem) if "cpu" in ptype else ("limit_bytes" in problem)
    assert one(db, "select count(*) from datasets where tenant_id = :t", t=tenant_id) == 0
    assert server.proc.poll() is None  # the API process lives on
    tmp = Path(env.get("SODM_DATA_DIR", stack_env["SODM_DATA_DIR"])) / "tmp"
    assert not list(tmp.glob("upload-*"))  # a killed child's upload directory is gone
