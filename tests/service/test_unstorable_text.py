"""Text Postgres cannot store (issue 36): NUL in a text or JSONB value, lone UTF-16
surrogates (``"\\ud800"`` is valid JSON, not UTF-8). Each is a 422 naming the field (or, in
an uploaded file, the row and column) on the real uvicorn, and nothing is stored. A webhook
``description`` with a NUL used to be a 500; a Parquet label with a NUL inside was
``500 ingest-crashed``, one with a trailing NUL was silently merged with the label without it
(numpy's ``str`` drops trailing NULs), and a column name with a NUL made every training job
on the dataset fail with an internal error."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.schemas.common import unstorable

NUL, LONE = "\x00", "\ud800"


@pytest.fixture(scope="module")
def fresh(api_server: str, make_tenant) -> Iterator[tuple[httpx.Client, str]]:
    """A new tenant's client on the session's uvicorn, with one model (for PATCH / aliases)
    and its dataset id."""
    import numpy as np

    from solver import ODMClassifier
    from tests.service.model_rows import dataset_row, register_model

    tenant_id, key = make_tenant()
    X = np.array([[0.0, 1.0], [1.0, 0.0], [0.2, 0.9], [0.8, 0.1]])
    ds = dataset_row(tenant_id, 4, 2)
    register_model(tenant_id, ds, ODMClassifier(kernel="linear").fit(X, [1, -1, 1, -1]), "txt")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as c:
        yield c, ds


def _send(client: httpx.Client, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
    """``body`` as JSON with ``\\uXXXX`` escapes (httpx would refuse to encode a surrogate)."""
    return client.request(method, path, content=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"})


def _refused(r: httpx.Response, field: str) -> dict:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    fields = [e.get("field") for e in body.get("errors", [])] + [body.get("field")]
    assert field in fields, body
    return body


HOOK = {"url": "https://93.184.216.34/hook", "events": ["job.succeeded"]}


@pytest.mark.parametrize("bad", [NUL, LONE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("POST", "/webhooks", {**HOOK, "description": "retrain{}"}, "description"),
    ("POST", "/webhooks", {**HOOK, "secret": "whsec_{}AAAA"}, "secret"),
    ("POST", "/webhooks", {**HOOK, "url": "https://93.184.216.34/{}"}, "url"),
    ("PATCH", "/models/{model}", {"description": "v{}"}, "description"),
    ("PATCH", "/models/{model}", {"tags": ["ok", "t{}"]}, "tags.1"),
    ("PUT", "/models/txt/aliases/champion", {"model_id": "m{}"}, "model_id"),
    ("POST", "/train", {"dataset_id": "{ds}", "algorithm": "odm", "name": "n{}"}, "name"),
    ("POST", "/train", {"dataset_id": "{ds}", "algorithm": "odm",
                        "search": {"grid": {"lam{}": [1.0]}}}, "search.grid"),
    ("POST", "/train", {"dataset_id": "{ds}", "algorithm": "odm",
                        "params": {"kernel": "rbf", "gamma": "scale{}"}}, "params.gamma"),
    ("POST", "/predictions", {"dataset_id": "{ds}", "model": "txt{}"}, "model"),
])
def test_text_fields(fresh, bad: str, method: str, path: str, body: dict, field: str) -> None:
    client, ds = fresh
    model = client.get("/models", params={"name": "txt"}).json()["items"][0]["id"]
    hooks = client.get("/webhooks").json()["items"]
    jobs = client.get("/jobs").json()["items"]
    text = json.dumps(body).replace("{}", json.dumps(bad)[1:-1]).replace("{ds}", ds)
    problem = _refused(_send(client, method, path.format(model=model), json.loads(text)), field)
    assert unstorable(problem) is None  # the answer echoes nothing unstorable either
    assert client.get("/webhooks").json()["items"] == hooks
    assert client.get("/jobs").json()["items"] == jobs
    after = client.get(f"/models/{model}").json()
    assert after["description"] == "" and after["tags"] == [] and after["aliases"] == []


def _parquet(columns: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


@pytest.mark.parametrize(("columns", "where"), [
    ({"a": [0.1, 0.2] * 5, "label": ["yes\x00no", "no"] * 5}, {"row": 1, "column": "label"}),
    # numpy's str dropped the trailing NUL: "x" and "x\0" were one class
    ({"a": [0.1, 0.2, 0.3] * 4, "label": ["x", "y", "x\x00"] * 4}, {"row": 3, "column": "label"}),
    ({"a\x00b": [0.1, 0.2] * 5, "label": [1, -1] * 5}, {"column": "a\\x00b"}),
])
def test_parquet_text_with_nul(fresh, columns: dict[str, Any], where: dict[str, Any]) -> None:
    client, _ = fresh
    before = client.get("/datasets").json()["items"]
    r = client.post("/datasets", files={"file": ("nul.parquet", _parquet(columns))},
                    data={"format": "parquet"})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["type"].endswith("/invalid-parquet") and "NUL" in problem["detail"], problem
    assert {k: problem.get(k) for k in where} == where, problem
    assert unstorable(problem) is None
    assert client.get("/datasets").json()["items"] == before


def test_parquet_column_name_over_the_token_cap(fresh) -> None:
    """A 1 MB column name was stored as a feature name and sent back by every answer about
    the model (a 1 MB GET /models/{id}); a CSV header cell that long was already a 413."""
    client, _ = fresh
    before = client.get("/datasets").json()["items"]
    r = client.post("/datasets", files={"file": ("wide.parquet", _parquet(
        {"a" * (1 << 20): [0.1, 0.2] * 5, "label": [1, -1] * 5}))}, data={"format": "parquet"})
    assert r.status_code == 413, r.text
    problem = r.json()
    assert problem["type"].endswith("/dataset-over-limit") and problem["field"] == "header"
    assert problem["value"] == 1 << 20 and problem["setting"] == "SODM_LIMIT_TOKEN_BYTES"
    assert len(r.content) < 4096
    assert client.get("/datasets").json()["items"] == before


def _not_utf8_strings(values: list[bytes]) -> pa.Array:
    """A string array whose bytes are not all UTF-8 (pyarrow checks them only when asked)."""
    import numpy as np

    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values), [
        None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(values))])


@pytest.mark.parametrize(("content", "where"), [
    # a label that is not UTF-8 (an invalid byte, an encoded lone surrogate)
    (lambda: _parquet({"a": [0.1, 0.2] * 5, "label": _not_utf8_strings(
        [b"ok", b"no", b"\xff\xfe", b"ok"] + [b"no"] * 6)}), {"row": 3, "field": "label"}),
    (lambda: _parquet({"a": [0.1, 0.2] * 5, "label": _not_utf8_strings(
        [b"ok", b"\xed\xa0\x80"] * 5)}), {"row": 2, "field": "label"}),
    # a column name that is not (the footer's bytes patched, same length)
    (lambda: _parquet({"ZZZZ": [0.1, 0.2] * 5, "label": [1, -1] * 5}).replace(
        b"ZZZZ", b"\xff\xfeZZ"), {"field": "header"}),
])
def test_parquet_text_that_is_not_utf8(fresh, content, where: dict[str, Any]) -> None:
    """Each was ``500 ingest-crashed`` (a ``UnicodeDecodeError`` in the parse)."""
    client, _ = fresh
    before = client.get("/datasets").json()["items"]
    r = client.post("/datasets", files={"file": ("u.parquet", content())},
                    data={"format": "parquet"})
    assert r.status_code == 422, r.text
    problem = r.json()
    assert problem["type"].endswith("/invalid-parquet") and "UTF-8" in problem["detail"]
    assert {k: problem.get(k) for k in where} == where, problem
    assert unstorable(problem) is None
    assert client.get("/datasets").json()["items"] == before
