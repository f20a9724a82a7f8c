"""POST /predict on the real stack: dense and sparse rows, and the problem for every kind
of bad body (wrong width, NaN / infinity, strings, booleans, empty, too many rows, unknown
model, bad references)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from solver import SODMClassifier
from tests.service.jobs_helpers import load_libsvm, submit, upload_as, wait_job


@pytest.fixture(scope="module")
def heart_model(api_server, tenant, datasets_dir, worker):
    import httpx

    ds = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    with httpx.Client(base_url=api_server, timeout=60,
                      headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
        job = submit(c, {"dataset_id": ds["id"], "algorithm": "sodm",
                         "params": {"kernel": "rbf"}, "test_fraction": 0.2, "seed": 2,
                         "name": "heart"})
        done = wait_job(c, job["id"])
        assert done["state"] == "SUCCEEDED", done["error"]
        return c.get(f"/models/{done['model_id']}").json()


def _problem(r, status: int, fragment: str = "") -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert fragment in body.get("detail", "") + json.dumps(body.get("errors", "")), body
    return body


def test_dense_and_sparse_predictions(client, heart_model, datasets_dir):
    X, y = load_libsvm(datasets_dir, "heart_scale", n_features=13)
    rows = X[:25]
    dense = client.post("/predict", json={"model_id": heart_model["id"],
                                          "instances": rows.tolist()})
    assert dense.status_code == 200, dense.text
    out = dense.json()
    assert set(out["labels"]) <= {-1, 1} and len(out["decision_values"]) == 25
    assert all(isinstance(v, int) for v in out["labels"])
    sparse_rows = [{str(j): float(v) for j, v in enumerate(r) if v != 0} for r in rows]
    sparse = client.post("/predict", json={"model": "heart", "instances": sparse_rows}).json()
    assert sparse["labels"] == out["labels"]
    np.testing.assert_allclose(sparse["decision_values"], out["decision_values"], rtol=1e-12)
    # the labels follow the sign of the decision values, in original label values
    f = np.asarray(out["decision_values"])
    assert out["labels"] == [1 if v > 0 else -1 for v in f]
    # the same seed and split gives the library's fit: same decisions
    idx = np.arange(len(y))
    from sklearn.model_selection import train_test_split

    tr, _ = train_test_split(idx, test_size=0.2, random_state=2, stratify=y)
    # (lam, gamma and theta left out of the request: the service searches them, "auto")
    lib = SODMClassifier(kernel="rbf", lam="auto", gamma="auto", theta="auto",
                         random_state=2).fit(X[np.sort(tr)], y[np.sort(tr)])
    np.testing.assert_allclose(lib.decision_function(rows), f, rtol=1e-9, atol=1e-9)


def test_bad_bodies(client, heart_model):
    mid = heart_model["id"]
    row = [0.1] * 13
    _problem(client.post("/predict", json={"model_id": mid, "instances": [row[:12]]}), 422,
             "expects 13")
    _problem(client.post("/predict", json={"model_id": mid, "instances": [row, row + [1]]}),
             422, "instances[1]")
    _problem(client.post("/predict", json={"model_id": mid, "instances": []}), 422, "empty")
    _problem(client.post("/predict", json={"model_id": mid, "instances": [["a"] + row[1:]]}),
             422, "not a number")
    _problem(client.post("/predict", json={"model_id": mid, "instances": [[True] + row[1:]]}),
             422, "not a number")
    zeros = ", ".join(["0"] * 12)
    nan_body = f'{{"model_id": "{mid}", "instances": [[NaN, {zeros}]]}}'
    _problem(client.post("/predict", content=nan_body,
                         headers={"Content-Type": "application/json"}), 422)
    inf_body = nan_body.replace("NaN", "Infinity")
    _problem(client.post("/predict", content=inf_body,
                         headers={"Content-Type": "application/json"}), 422)
    _problem(client.post("/predict", json={"model_id": mid, "instances": [{"13": 1.0}]}), 422,
             "feature index 13")
    _problem(client.post("/predict", json={"model_id": mid, "instances": [{"x": 1.0}]}), 422,
             "not a 0-based")
    # one index written twice: its values were summed into one feature (issue 36)
    _problem(client.post("/predict", json={"model_id": mid, "instances": [
        {"0": 1.0, "3": 0.5, "00": 2.0}]}), 422, "feature index 0 is given twice")
    _problem(client.post("/predict", json={"model_id": mid, "instances": [{"1": "2"}]}), 422,
             "not a number")
    _problem(client.post("/predict", json={"model_id": mid, "instances": ["1 2 3"]}), 422,
             "neither")
    _problem(client.post("/predict", json={"model_id": mid, "instances": [row] * 10_001}), 413)
    _problem(client.post("/predict", json={"model_id": "no-such", "instances": [row]}), 404)
    _problem(client.post("/predict", json={"model": "no-such", "instances": [row]}), 404)
    _problem(client.post("/predict", json={"model": "heart@99", "instances": [row]}), 404)
    _problem(client.post("/predict", json={"model": "heart@x", "instances": [row]}), 404)  # alias
    _problem(client.post("/predict", json={"model": "heart@-1", "instances": [row]}), 422)
    _problem(client.post("/predict", json={"model": "heart", "model_id": mid,
                                           "instances": [row]}), 422)
    _problem(client.post("/predict", json={"instances": [row]}), 422)
    _problem(client.post("/predict", json={"model_id": mid}), 422)
    ok = client.post("/predict", json={"model": "heart@1", "instances": [row]})
    assert ok.status_code == 200 and ok.json()["model_id"] == mid


def test_body_over_the_byte_limit_is_413(start_api, tenant, heart_model):
    """SODM_MAX_PREDICT_BODY_BYTES: a declared or a chunked body over it gets a 413 problem
    before it is parsed; a body under it is answered as usual."""
    import httpx

    server = start_api(SODM_MAX_PREDICT_BODY_BYTES="4096")
    auth = {"Authorization": f"Bearer {tenant[1]}"}
    row = [0.1] * 13
    big = json.dumps({"model_id": heart_model["id"], "instances": [row] * 100}).encode()
    assert len(big) > 4096
    with httpx.Client(base_url=server.url, timeout=60, headers=auth) as c:
        body = _problem(c.post("/predict", content=big,
                               headers={"Content-Type": "application/json"}), 413, "4096")
        assert body["type"].endswith("/body-too-large") and body["limit_bytes"] == 4096

        def chunks():  # no Content-Length: the middleware counts the streamed bytes
            for i in range(0, len(big), 1000):
                yield big[i:i + 1000]

        r = c.post("/predict", content=chunks(), headers={"Content-Type": "application/json"})
        assert "content-length" not in r.request.headers
        _problem(r, 413, "limit is 4096")
        # the limit covers every JSON route, uploads excepted (they have their own)
        _problem(c.post("/train", content=b"{" + b" " * 5000 + b"}",
                        headers={"Content-Type": "application/json"}), 413)
        ok = c.post("/predict", json={"model_id": heart_model["id"], "instances": [row]})
        assert ok.status_code == 200, ok.text


def test_loaded_models_are_cached_in_the_api_process(start_api, client, tenant, heart_model,
                                                     stack_env):
    """The session's API has the model loaded (earlier predictions): it keeps answering
    when the stored bytes disappear, while a fresh API process, with nothing cached, cannot."""
    import httpx

    from tests.fixtures.model_blobs import replaced_bytes

    mid = heart_model["id"]
    row = [0.1] * 13
    first = client.post("/predict", json={"model_id": mid, "instances": [row]})
    assert first.status_code == 200
    with replaced_bytes(mid, None):
        again = client.post("/predict", json={"model_id": mid, "instances": [row]})
        assert again.status_code == 200 and again.json() == first.json()
        fresh = start_api()
        with httpx.Client(base_url=fresh.url, timeout=60,
                          headers={"Authorization": f"Bearer {tenant[1]}"}) as c:
            _problem(c.post("/predict", json={"model_id": mid, "instances": [row]}), 404,
                     "has no stored file")


def _npy(header: bytes, data: bytes = b"") -> bytes:
    """A ``.npy`` body with this header dictionary text (padded as numpy pads it)."""
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    text = header + b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data


def _arrow(table, compression: str | None = None) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_binary_bodies_are_checked_before_anything_is_allocated(client, heart_model):
    """A ``.npy`` header or an Arrow batch declaring an enormous shape, a header numpy's own
    parser trips over, a compressed Arrow batch (Arrow allocates its declared size before
    decompressing): each a 4xx problem, and the API process answers as before."""
    import pyarrow as pa

    npy, arrow = ({"Content-Type": t} for t in ("application/x-npy",
                                                 "application/vnd.apache.arrow.stream"))
    mid = {"model_id": heart_model["id"]}

    def post(body: bytes, headers: dict[str, str]):
        return client.post("/predict", params=mid, content=body, headers=headers)

    # 94.6 TiB declared: numpy allocated it before reading (a 500 MemoryError)
    huge = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000, 13), }"
    _problem(post(_npy(huge, b"\0" * 104), npy), 413, "1000000000000 rows")
    wide = b"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1000000000000000), }"
    _problem(post(_npy(wide, b"\0" * 16), npy), 422, "the body holds 16")
    # a header cut short: numpy's tokenizer raised TokenError (a 500)
    _problem(post(_npy(b"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 13"), npy),
             422, "not a .npy")
    _problem(post(b"PK\x03\x04" + b"\0" * 60, npy), 422, "archive")
    cols = {f"f{j}": np.zeros(3) for j in range(13)}
    _problem(post(_arrow(pa.table(cols), "lz4"), arrow), 422, "compressed")
    # a batch header declaring 10^12 rows over buffers for 3: refused from the header
    plain = bytearray(_arrow(pa.table(cols)))
    batch = list(pa.ipc.MessageReader.open_stream(pa.py_buffer(bytes(plain))))[1]
    meta = batch.metadata.to_pybytes()
    at = bytes(plain).find(meta) + meta.find((3).to_bytes(8, "little"))
    plain[at:at + 8] = (10 ** 12).to_bytes(8, "little")
    _problem(post(bytes(plain), arrow), 413, "1000000000000 rows")
    ok = post(_arrow(pa.table(cols)), arrow)
    assert ok.status_code == 200 and len(ok.json()["labels"]) == 3, ok.text
    rows = io.BytesIO()
    np.save(rows, np.full((3, 13), 0.5))  # float64: the rows are a view of the body
    same = post(rows.getvalue(), npy)
    assert same.status_code == 200 and len(same.json()["labels"]) == 3, same.text
