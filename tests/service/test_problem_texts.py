"""Problem texts are clean and bounded wherever they are built (``app.core.problems``): no NUL,
control character or lone surrogate, and a bounded size, in an answer and in a stored
``error``. A LIBSVM file of NUL bytes used to end ``500 ingest-crashed``: its problem echoed
the NULs, which a Postgres JSONB column refuses."""

from __future__ import annotations

import io
import json
import re

from app.core.problems import MAX_DETAIL_CHARS, MAX_ITEMS, MAX_TEXT_CHARS, ProblemError

UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def test_problem_texts_are_clean_and_bounded() -> None:
    nasty = "a\x00b\x07c\x1b[31m\x85d\ud800e\u2028f\tg\nh"
    body = ProblemError(422, "Bad " + nasty, detail=nasty * 1000, type="bad",
                        value=nasty, ratio=float("nan"), far=float("-inf"),
                        errors=[{"field": nasty, "message": "m" * 50_000}] * 500,
                        deep=[[[[[[[["x\x00"]]]]]]]], keys={nasty: 1}).body()
    text = json.dumps(body, allow_nan=False)  # NaN and infinities are not JSON
    assert not UNSAFE.search(json.loads(text)["detail"])
    for s in _strings(json.loads(text)):
        assert not UNSAFE.search(s), repr(s)
    assert body["title"].startswith("Bad a\\x00b\\x07c\\x1b[31m\\x85d\\ud800e\\u2028f g h")
    assert len(body["detail"]) == MAX_DETAIL_CHARS and body["detail"].endswith("...")
    assert len(body["errors"]) == MAX_ITEMS
    assert len(body["errors"][0]["message"]) == MAX_TEXT_CHARS
    assert body["ratio"] == "nan" and body["far"] == "-inf"
    assert len(text) < 200_000
    # a stored problem read back is the same problem (nothing is escaped twice)
    assert ProblemError.from_body(body).body() == body


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_file_of_nul_bytes_is_a_problem_not_a_crash(api) -> None:
    """100 KB of NUL bytes: one token over the token cap, echoed (cut) in the problem; the
    child records the problem on the dataset row (JSONB) and the answer is that 413."""
    before = {d["id"] for d in api.get("/datasets").json()["items"]}
    r = api.post("/datasets", files={"file": ("nul.libsvm", io.BytesIO(b"\x00" * (100 << 10)))},
                 data={"format": "libsvm"})
    assert r.status_code == 413, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    problem = r.json()
    assert problem["type"].endswith("/dataset-over-limit") and problem["line"] == 1
    assert all(not UNSAFE.search(s) for s in _strings(problem)), problem
    assert problem["token"].startswith("\\x00\\x00") and len(r.content) < 4096
    assert {d["id"] for d in api.get("/datasets").json()["items"]} == before  # none kept


def test_the_instance_echoes_the_path_clean_and_bounded(client) -> None:
    """``instance`` is the request's path as the client wrote it: a NUL, an escape sequence
    or a long path in it came back raw (real uvicorn: the path is decoded there)."""
    r = client.get("/datasets/a%00b%1b%5b31m%c2%85")
    assert r.status_code == 422 and r.headers["content-type"].startswith(
        "application/problem+json"), r.text
    assert r.json()["instance"] == "/datasets/a\\x00b\\x1b[31m\\x85", r.json()
    r = client.get("/datasets/" + "x" * 5000)
    assert r.status_code == 422, r.text
    instance = r.json()["instance"]
    assert len(instance) == MAX_TEXT_CHARS and instance.endswith("..."), len(instance)
    assert all(not UNSAFE.search(s) for s in _strings(r.json()))
