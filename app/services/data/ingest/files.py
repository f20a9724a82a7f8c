"""What an upload is before it is parsed: its compression (gzip, xz; decompressed with a
cap on the output) and its format (declared, else implied by the file name)."""

from __future__ import annotations

import gzip
import lzma
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.problems import ProblemError
from app.services.data.ingest.errors import echo

FORMATS = ("csv", "libsvm", "parquet")
_EXTENSIONS = {".csv": "csv", ".tsv": "csv", ".libsvm": "libsvm", ".svm": "libsvm",
               ".svmlight": "libsvm", ".txt": "libsvm", ".t": "libsvm", ".scale": "libsvm",
               ".parquet": "parquet", ".pq": "parquet"}
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
PARQUET_MAGIC = b"PAR1"

CHUNK = 1 << 20  # bytes read at a time where no line structure is needed


def detect_compression(path: Path) -> str | None:
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(XZ_MAGIC):
        return "xz"
    return None


def decompress(src: Path, kind: str, dest: Path, max_bytes: int,
               progress: Callable[[int], None] | None = None) -> int:
    """Stream-decompress ``src`` into ``dest``, refusing (413) more than ``max_bytes`` of
    output (zip-bomb safe: output is counted chunk by chunk as it is produced); returns the
    output size. ``progress(written)`` after each chunk (it may raise to stop: the storage
    quota). Corrupt or truncated streams are a 422."""
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
                if progress is not None:
                    progress(written)
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
                               type="unknown-format", field="format", value=echo(declared))
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
