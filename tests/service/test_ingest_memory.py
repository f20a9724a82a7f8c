"""Parsing memory is bounded by about twice the arrays it produces (issue 14): a fresh
Python process parses a generated ~200 MB LIBSVM file and a CSV file of similar size,
and its peak RSS grows by at most 2.5 x the bytes of the produced arrays + 64 MiB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO_ROOT

TARGET_BYTES = 200 << 20
FACTOR = 2.5
ALLOWANCE = 64 << 20

# Runs in the child: imports everything the parse needs, notes its RSS, parses, and
# prints the peak RSS growth and the bytes of the arrays produced.
CHILD = r"""
import json, sys
from pathlib import Path
import scipy.sparse as sp
import app.services.filestore.storage  # imported lazily by the parse: not part of its memory
from app.services.data import ingest

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ":"))

# ru_maxrss is inherited from the forking parent (a test process of a few GB): reset the
# peak (VmHWM) to the current RSS and read it back instead
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
base = status("VmRSS")
parsed = ingest.parse_file(Path(sys.argv[1]), sys.argv[2], "label")
peak = status("VmHWM")
X = parsed.X
arrays = (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes if sp.issparse(X)
          else X.nbytes) + parsed.y.nbytes
print(json.dumps({"growth": peak - base, "arrays": arrays, "shape": list(X.shape)}))
"""


def write_repeated(path: Path, block: bytes, target: int, head: bytes = b"") -> int:
    """``head``, then ``block`` until the file holds about ``target`` bytes (a second or
    two)."""
    with open(path, "wb") as fh:
        fh.write(head)
        for _ in range(max(1, target // len(block))):
            fh.write(block)
    return path.stat().st_size


def libsvm_block(rows: int = 20_000, per_row: int = 10, width: int = 500) -> bytes:
    """Rows of ``per_row`` ascending random features out of ``width``, labels 0/1."""
    rng = np.random.default_rng(0)
    idx = np.sort(rng.random((rows, width)).argsort(axis=1)[:, :per_row], axis=1) + 1
    vals = rng.random((rows, per_row))
    return "".join(
        f"{r % 2} " + " ".join(f"{j}:{v:.6f}" for j, v in zip(idx[r], vals[r], strict=True))
        + "\n" for r in range(rows)).encode()


def csv_block(rows: int = 20_000, cols: int = 10) -> bytes:
    """Rows of ``cols`` random features and a 0/1 label (the header is written once)."""
    rng = np.random.default_rng(0)
    vals = rng.random((rows, cols))
    return "".join(",".join(f"{v:.6f}" for v in vals[r]) + f",{r % 2}\n"
                   for r in range(rows)).encode()


def measure(path: Path, fmt: str) -> dict[str, int]:
    """The child's peak RSS growth and array bytes for parsing ``path``."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), fmt], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["libsvm", "csv"])
def test_parse_peak_memory_is_about_twice_the_arrays(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"big.{fmt}"
    if fmt == "libsvm":
        size = write_repeated(path, libsvm_block(), TARGET_BYTES)
    else:
        header = ",".join(f"f{j}" for j in range(10)) + ",label\n"
        size = write_repeated(path, csv_block(), TARGET_BYTES, header.encode())
    got = measure(path, fmt)
    assert got["shape"][0] > 1_000_000, got
    bound = FACTOR * got["arrays"] + ALLOWANCE
    assert got["growth"] <= bound, (size, got, bound)
