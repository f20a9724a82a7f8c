"""The Python client (``sodm_client``) against the real service: an upload with progress,
train-and-wait following ``/events``, predictions by name, alias and id, a batch prediction
job and its downloads, the registry, problems as ``SodmError``, and ``Retry-After``
honoured on a 429."""

from __future__ import annotations

import lzma
import time

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

from sodm_client import Client, SodmError
from tests.service.jobs_helpers import load_libsvm

PARAMS = {"kernel": "rbf", "gamma": 0.1, "lam": 10.0, "theta": 0.3}


@pytest.fixture
def sodm(api_server, tenant):
    with Client(api_server, tenant[1]) as c:
        yield c


@pytest.fixture(scope="module")
def heart_file(datasets_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("client") / "heart_scale.libsvm"
    path.write_bytes(lzma.decompress((datasets_dir / "heart_scale.xz").read_bytes()))
    return path


def test_upload_train_predict_and_the_registry(sodm, heart_file, datasets_dir, worker,
                                               tmp_path):
    sent: list[tuple[int, int]] = []
    ds = sodm.upload(heart_file, format="libsvm", name="client-heart",
                     progress=lambda done, total: sent.append((done, total)))
    assert ds["state"] == "ready" and ds["n_rows"] == 270
    size = heart_file.stat().st_size
    assert sent and sent[-1] == (size, size)
    assert [d for d, _ in sent] == sorted(d for d, _ in sent)

    events: list[tuple[str, dict]] = []
    model = sodm.train_and_wait(ds["id"], "sodm", params=PARAMS, name="client",
                                test_fraction=0.2, seed=5,
                                on_event=lambda e, d: events.append((e, d)))
    assert model["name"] == "client" and model["version"] == 1
    states = [d["state"] for e, d in events if e == "state"]
    order = ["QUEUED", "RUNNING", "SUCCEEDED"]  # a short RUNNING may fall between two polls
    assert states[-1] == "SUCCEEDED" and states == sorted(states, key=order.index)
    assert any(e == "progress" for e, _ in events)

    X, _ = load_libsvm(datasets_dir, "heart_scale", n_features=13)
    by_id = sodm.predict(X[:10], model_id=model["id"])
    assert sodm.predict(X[:10].tolist(), model="client") == by_id
    sodm.set_alias("client", "champion", version=1)
    assert sodm.predict(X[:10], model="client@champion")["decision_values"] == \
        by_id["decision_values"]
    assert [a["alias"] for a in sodm.list_aliases("client")] == ["champion"]
    updated = sodm.update_model(model["id"], description="from the client", tags=["py"])
    assert updated["tags"] == ["py"] and updated["aliases"] == ["champion"]
    assert [m["id"] for m in sodm.list_models(name="client", tags=["py"])] == [model["id"]]
    assert sodm.download_model(model["id"], tmp_path / "m.sodm").stat().st_size > 0

    job = sodm.create_prediction(ds["id"], model="client@champion")
    done = sodm.wait_prediction(job["id"])
    assert done["state"] == "SUCCEEDED"
    table = pq.read_table(sodm.download_prediction(job["id"], tmp_path / "p.parquet"))
    assert table.num_rows == 270
    np.testing.assert_allclose(table.column("decision_value").to_numpy()[:10],
                               by_id["decision_values"], rtol=1e-12)
    csv = sodm.download_prediction(job["id"], tmp_path / "p.csv", format="csv").read_text()
    assert csv.splitlines()[0].startswith('"row_id"') and len(csv.splitlines()) == 271

    sodm.delete_alias("client", "champion")
    with pytest.raises(SodmError) as exc:
        sodm.predict(X[:1], model="client@champion")
    assert exc.value.status == 404 and exc.value.type.endswith("/not-found")
    assert "no alias 'champion'" in exc.value.detail


def test_problems_are_sodm_errors(sodm, tmp_path, worker, heart_file):
    bad = tmp_path / "bad.libsvm"
    bad.write_text("1 1:0.5\n1 x:2\n")
    with pytest.raises(SodmError) as exc:
        sodm.upload(bad, format="libsvm")
    assert exc.value.status == 422 and exc.value.problem.get("line") == 2
    with pytest.raises(SodmError) as exc:
        sodm.predict([[1.0, 2.0]], model="no-such-model")
    assert exc.value.status == 404 and str(exc.value).startswith("404 Model not found")
    ds = sodm.upload(heart_file, format="libsvm")
    with pytest.raises(SodmError) as exc:  # more partitions than training rows
        sodm.train_and_wait(ds["id"], "sodm", params={**PARAMS, "p": 64, "levels": 3})
    assert exc.value.status == 422 and "partitions" in exc.value.detail


def test_retry_after_is_honoured_on_429(start_api, make_tenant):
    # a ten-second window: the patient client waits for the next one, not a whole minute
    server = start_api(SODM_RATE_LIMIT_PER_MINUTE="2", SODM_RATE_LIMIT_WINDOW_SECONDS="10")
    _, key = make_tenant()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    with Client(server.url, key, max_retries=0) as impatient:
        list(impatient.list_models())
        list(impatient.list_models())
        with pytest.raises(SodmError) as exc:
            list(impatient.list_models())
        assert exc.value.status == 429 and exc.value.type.endswith("/rate-limited")
        assert 1 <= exc.value.problem["retry_after_seconds"] <= 10
    seen = httpx.get(f"{server.url}/models", headers={"Authorization": f"Bearer {key}"})
    assert seen.headers["RateLimit-Policy"] == '"key";q=2;w=10'
    with Client(server.url, key, sleep=sleep) as patient:
        t0 = time.monotonic()
        assert list(patient.list_models()) == []  # waited for the next window, then 200
    assert len(waits) == 1 and 1 <= waits[0] <= 10
    assert time.monotonic() - t0 >= waits[0]
    # a wait longer than max_retry_wait is not waited for
    with Client(server.url, key, max_retry_wait=0.5) as hasty, \
            pytest.raises(SodmError) as exc:
        for _ in range(3):
            list(hasty.list_models())
    assert exc.value.status == 429


