"""The problems an upload is refused with: 422 for data that is not what its format says
(``invalid``), 413 for data over one of this server's caps (``over_limit``); an offending
value or detail is cut to a bounded length before it is echoed back."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.core.problems import ProblemError

MAX_VALUE_ECHO = 80  # characters of an offending value echoed back
MAX_DETAIL = 400  # characters of a problem's detail


def echo(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_VALUE_ECHO else text[:MAX_VALUE_ECHO] + "..."


def invalid(fmt: str, detail: str, **ext: Any) -> ProblemError:
    titles = {"libsvm": "Invalid LIBSVM data", "csv": "Invalid CSV data",
              "parquet": "Invalid Parquet data"}
    if "value" in ext:
        ext["value"] = echo(ext["value"])
    if len(detail) > MAX_DETAIL:  # the detail quotes the offending token: cut a huge one
        detail = detail[:MAX_DETAIL] + "..."
    return ProblemError(422, titles.get(fmt, "Invalid dataset"), detail=detail,
                        type=f"invalid-{fmt}", format=fmt, **ext)


def over_limit(what: str, value: int, limit: int, setting: str, **ext: Any) -> ProblemError:
    """413 naming the cap (``what``, its setting and limit) and the upload's value."""
    return ProblemError(413, "Dataset over a limit",
                        detail=f"{what}: {value} is over this server's limit of {limit} "
                               f"({setting})", type="dataset-over-limit", cap=what,
                        value=value, limit=limit, setting=setting, **ext)


def first_true(mask: Any) -> int:
    """The position of the first true entry of a pyarrow boolean (chunked) array: the row
    an error names."""
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])
