"""Text uploads (CSV, LIBSVM) read in line-cut chunks, and the checks every text upload
passes before it is parsed: not empty, not Parquet, UTF-8 without NUL bytes (named by line
and byte offset), no line or token longer than the caps (413 naming the line and field)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.config import get_settings
from app.core.problems import ProblemError
from app.services.data.ingest.errors import echo, over_limit
from app.services.data.ingest.files import CHUNK, PARQUET_MAGIC

BOM = b"\xef\xbb\xbf"
# bytes a text parser reads at a time (cut at a line end); its memory is the
# arrays it builds plus a few chunks (pyarrow reads up to 32 blocks of about a chunk ahead)
PARSE_CHUNK = 1 << 20


# A decimal number. Possessive quantifiers (no backtracking into a digit run) keep every
# match linear in the token's length: "\d+\.?\d*" split a digit run in n ways, so a long
# digit run cost O(n^2) with the GIL held and froze the whole API. Compile it with
# re.ASCII: the fast parsers read ASCII digits only, so "\d" must not match "٣" or "²".
NUM = r"[+-]?+(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+"
NUM_RE = re.compile(NUM, re.ASCII)


def line_chunks(path: Path, size: int | None = None) -> Iterator[tuple[bytes, int, int]]:
    """The file in chunks of about ``size`` bytes (default ``PARSE_CHUNK``, read at the
    call), each cut after a newline (a longer line makes its chunk longer): ``(chunk, byte
    offset, line number of its first line)``. A newline is ASCII, so a cut never splits a
    UTF-8 sequence."""
    size = PARSE_CHUNK if size is None else size
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
class TextStats:
    """What the checking pass counted: the longest chunk (at least the longest line), and
    the newlines and colons (upper bounds of a LIBSVM file's rows and entries)."""

    longest: int
    newlines: int
    colons: int


def check_text(path: Path, fmt: str) -> TextStats:
    """Refuse an empty file, a Parquet file and binary content (NUL bytes, invalid UTF-8,
    named by line and byte offset) in one pass over line-cut chunks, before any parse
    error can be reported."""
    nonblank, longest, newlines, colons = False, 0, 0, 0
    for chunk, offset, line in line_chunks(path):
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
    return TextStats(longest, newlines, colons)


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


def first_line(path: Path, start: int = 0) -> bytes:
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
                      line=line, field=field, token=echo(token.decode("utf-8", "replace")))
