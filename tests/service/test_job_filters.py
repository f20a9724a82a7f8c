"""``GET /jobs`` filters (dataset, model name, state), through the in-process API."""

from __future__ import annotations

import lzma
from pathlib import Path

from app.core.db import session_scope
from app.core.orm import Job


def test_jobs_filter_by_dataset_and_model_name(api, make_tenant, api_as, private_queue,
                                               datasets_dir: Path) -> None:
    client = api_as(make_tenant()[1])  # a tenant of its own: exact counts
    text = lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes())
    a, b = (client.post("/datasets", files={"file": (f"{n}.libsvm", text)},
                        data={"format": "libsvm"}).json()["id"] for n in "ab")
    made = [client.post("/train", json={"dataset_id": ds, "algorithm": "odm", "name": name})
            .json()["id"] for ds, name in ((a, "alpha"), (a, "beta"), (b, "alpha"))]
    try:
        def ids(**params: str) -> list[str]:
            r = client.get("/jobs", params=params)
            assert r.status_code == 200, r.text
            return [j["id"] for j in r.json()["items"]]

        assert ids(dataset_id=a) == [made[1], made[0]]  # newest first
        assert ids(name="alpha") == [made[2], made[0]]
        assert ids(dataset_id=a, name="alpha") == [made[0]]
        assert ids(dataset_id=b, state="SUCCEEDED") == []
        assert ids(dataset_id="no-such-dataset") == []
        assert client.get("/jobs", params={"name": "bad name!"}).status_code == 422
        assert client.get("/jobs", params={"dataset_id": "../x"}).status_code == 422
        assert api.get("/jobs", params={"dataset_id": a}).json()["items"] == []  # tenancy
    finally:
        with session_scope() as s:
            for job_id in made:
                s.get(Job, job_id).state = "CANCELLED"
