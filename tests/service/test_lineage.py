"""Dataset lineage (issue 37): the content hash of a dataset's parsed rows, labels and values
is the same whatever format carried them, an upload of content the tenant already has names
the earlier dataset (``duplicate_of``), every model shows its dataset's hash, rows and
features, and ``GET /models?dataset_sha256=`` finds the models trained on that content. The
hash of stored datasets is recomputed from their files by ``sodm backfill-hashes``."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from sqlalchemy import update

from app.core.db import session_scope
from app.core.orm import Dataset
from app.services.data.content_hash import content_sha256
from app.services.filestore.storage import normalize_labels
from tests.service.jobs_helpers import libsvm_bytes, load_libsvm


@pytest.fixture(scope="module")
def heart_text(datasets_dir) -> bytes:
    return libsvm_bytes(datasets_dir, "heart_scale")


@pytest.fixture(scope="module")
def heart(datasets_dir) -> tuple[np.ndarray, np.ndarray]:
    return load_libsvm(datasets_dir, "heart_scale")


def _csv(X: np.ndarray, y: np.ndarray) -> bytes:
    lines = ["label," + ",".join(f"age{j}" for j in range(X.shape[1]))]
    lines += [f"{lab}," + ",".join(repr(float(v)) for v in row)
              for row, lab in zip(X, y, strict=True)]
    return ("\n".join(lines) + "\n").encode()


def _parquet(X: np.ndarray, y: np.ndarray) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"y": y, **{f"c{j}": X[:, j] for j in range(X.shape[1])}}), buf)
    return buf.getvalue()


def _hash(X, y) -> str:
    labels, kind = normalize_labels(np.asarray(y))
    return content_sha256(X, labels, kind)


def test_the_hash_is_of_the_content_not_of_its_form(heart) -> None:
    X, y = heart
    dense = _hash(X, y)
    assert dense == _hash(sp.csr_matrix(X), y)  # the layout does not matter
    assert dense == _hash(X, y.astype(np.float64))  # integral float labels are ints
    with_zero = sp.csr_matrix(X)
    with_zero.data[with_zero.data == with_zero.data[0]] = 0.0  # explicit zeros
    assert _hash(with_zero, y) == _hash(with_zero.toarray(), y)
    # each part of the content changes it: a value, a label, a row's order, the width
    changed = X.copy()
    changed[100, 3] += 1e-12
    swapped = X[[1, 0, *range(2, len(y))]]
    wider = np.hstack([X, np.zeros((len(y), 1))])
    others = {_hash(changed, y), _hash(X, -y), _hash(swapped, y[[1, 0, *range(2, len(y))]]),
              _hash(wider, y), _hash(X, np.where(y > 0, "yes", "no"))}
    assert dense not in others and len(others) == 5
    # text labels hash by their texts, whatever their order of appearance
    text = np.where(y > 0, "yes", "no")
    assert _hash(X, text) == _hash(X, text.astype(object))


def test_hash_definition_is_reproducible_by_hand() -> None:
    """The canonical form the docs give, rebuilt with hashlib alone."""
    X = np.array([[0.0, 2.5, 0.0], [1.0, 0.0, -3.0]])
    y = np.array([1, -1])
    h = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    expected = hashlib.sha256(
        b"sodm-content-v1\nrows=2\nfeatures=3\nlabels=int\n"
        + h(np.array([1, -1], "<i8").tobytes()) + h(np.array([1, 2], "<i8").tobytes())
        + h(np.array([1, 0, 2], "<i8").tobytes())
        + h(np.array([2.5, 1.0, -3.0], "<f8").tobytes())).hexdigest()
    assert _hash(X, y) == expected


def test_same_data_in_three_formats_is_one_content(api_as, make_tenant, heart_text, heart
                                                   ) -> None:
    X, y = heart
    api = api_as(make_tenant()[1])
    first = api.post("/datasets", files={"file": ("heart.libsvm", heart_text)},
                     data={"format": "libsvm"})
    assert first.status_code == 201, first.text
    first = first.json()
    assert first["content_sha256"] == _hash(X, y)
    assert first["duplicate_of"] is None
    uploads = {"heart.csv": _csv(X, y), "heart.parquet": _parquet(X, y)}
    for name, data in uploads.items():
        r = api.post("/datasets", files={"file": (name, data)},
                     data={"label_column": "y" if name.endswith("parquet") else "label"})
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["sha256"] != first["sha256"]  # other bytes ...
        assert body["content_sha256"] == first["content_sha256"]  # ... the same content
        assert body["duplicate_of"] == first["id"]
        assert api.get(f"/datasets/{body['id']}").json()["duplicate_of"] == first["id"]
    other = api.post("/datasets", files={"file": ("half.csv", _csv(X[:100], y[:100]))}).json()
    assert other["content_sha256"] != first["content_sha256"] and other["duplicate_of"] is None
    listed = {d["id"]: d for d in api.get("/datasets").json()["items"]}
    assert [d["duplicate_of"] for d in listed.values()].count(first["id"]) == 2
    assert listed[first["id"]]["duplicate_of"] is None
    # another tenant's copy is no duplicate of this one's
    stranger = api_as(make_tenant()[1]).post(
        "/datasets", files={"file": ("heart.libsvm", heart_text)}).json()
    assert stranger["content_sha256"] == first["content_sha256"]
    assert stranger["duplicate_of"] is None
    # the first deleted, the next copy is the original now
    assert api.delete(f"/datasets/{first['id']}").status_code == 204
    csv_copy = next(d for d in listed.values() if d["format"] == "csv"
                    and d["content_sha256"] == first["content_sha256"])
    assert api.get(f"/datasets/{csv_copy['id']}").json()["duplicate_of"] is None


def test_models_show_their_data_and_are_found_by_its_hash(api_as, make_tenant, heart_text,
                                                          heart) -> None:
    from solver import ODMClassifier
    from tests.service.model_rows import register_model

    X, y = heart
    tenant_id, key = make_tenant()
    api = api_as(key)
    a = api.post("/datasets", files={"file": ("heart.libsvm", heart_text)}).json()
    b = api.post("/datasets", files={"file": ("heart.csv", _csv(X, y))}).json()
    half = api.post("/datasets", files={"file": ("half.csv", _csv(X[:120], y[:120]))}).json()
    est = ODMClassifier(kernel="linear", lam=10.0, theta=0.3).fit(X, y)
    on_a = register_model(tenant_id, a["id"], est, "lineage")
    on_b = register_model(tenant_id, b["id"], est, "lineage")
    on_half = register_model(tenant_id, half["id"], est, "lineage-half")
    m = api.get(f"/models/{on_a}").json()
    assert m["dataset"] == {"id": a["id"], "name": a["name"],
                            "content_sha256": a["content_sha256"], "n_rows": 270,
                            "n_features": 13}
    found = api.get("/models", params={"dataset_sha256": a["content_sha256"]}).json()
    assert {x["id"] for x in found["items"]} == {on_a, on_b}
    assert all(x["dataset"]["content_sha256"] == a["content_sha256"] for x in found["items"])
    upper = api.get("/models", params={"dataset_sha256": a["content_sha256"].upper()}).json()
    assert {x["id"] for x in upper["items"]} == {on_a, on_b}
    assert [x["id"] for x in api.get("/models", params={
        "dataset_sha256": half["content_sha256"]}).json()["items"]] == [on_half]
    # the hash of another tenant's identical data finds nothing of this tenant's there
    other = api_as(make_tenant()[1])
    assert other.get("/models", params={"dataset_sha256": a["content_sha256"]}
                     ).json()["items"] == []
    bad = api.get("/models", params={"dataset_sha256": "xyz"})
    assert bad.status_code == 422 and "dataset_sha256" in bad.text


def test_backfill_recomputes_the_hash_from_the_stored_files(api_as, make_tenant, heart_text
                                                           ) -> None:
    from app.services.data.dataset_catalog import backfill_content_hashes

    api = api_as(make_tenant()[1])
    ds = api.post("/datasets", files={"file": ("heart.libsvm", heart_text)}).json()
    with session_scope() as s:  # as stored before the column existed
        s.execute(update(Dataset).where(Dataset.id == ds["id"]).values(content_sha256=None))
    assert api.get(f"/datasets/{ds['id']}").json()["content_sha256"] is None
    done, missing = backfill_content_hashes()
    assert done >= 1 and ds["id"] not in missing
    assert api.get(f"/datasets/{ds['id']}").json()["content_sha256"] == ds["content_sha256"]
    with session_scope() as s:
        assert s.get(Dataset, ds["id"]).content_sha256 == ds["content_sha256"]
