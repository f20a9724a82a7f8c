"""No shared disk: the API and a worker with data directories of their own, datasets and
prediction results in an S3-protocol bucket (moto's standalone server, started here), models
in Postgres. Upload, local and Spark training (classic ``local[2]``: its executors read the
bucket with pyarrow), ``/predict``, a batch prediction and its downloads all work, and a
second API process on a third data directory serves the same model and result; nothing of
a dataset, model or result is ever written to any of the three data directories."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.fixtures.services import free_port
from tests.fixtures.stack import _start
from tests.fixtures.worker import _Starter
from tests.service.jobs_helpers import load_libsvm, submit, upload_as, wait_job

pytestmark = pytest.mark.spark

BUCKET = "sodm-test"


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 with an empty bucket; the environment that points
    the service at it."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H",
                             "127.0.0.1", "-p", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(endpoint, timeout=2)
                break
            assert proc.poll() is None and time.monotonic() < deadline, "moto did not start"
            time.sleep(0.2)
        env = {"MOTO_ENDPOINT": endpoint}
        _s3(env).create_bucket(Bucket=BUCKET)
        yield {**creds, "SODM_STORAGE_URL": f"s3://{BUCKET}/sodm?endpoint_override="
                                            f"127.0.0.1:{port}&scheme=http&region=us-east-1",
               "MOTO_ENDPOINT": endpoint}
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def _s3(env: dict[str, str]):  # noqa: ANN202 - a boto3 S3 client
    import boto3

    return boto3.client("s3", endpoint_url=env["MOTO_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def _keys(env: dict[str, str], prefix: str) -> list[str]:
    pages = _s3(env).get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _stored_files(data_dir: Path) -> list[str]:
    """What a data directory holds of datasets, models and results (should be nothing)."""
    return [str(p.relative_to(data_dir)) for sub in ("datasets", "predictions", "models")
            for p in (data_dir / sub).rglob("*") if p.is_file()]


def test_the_service_runs_without_a_shared_disk(s3_env, stack_env, tenant, datasets_dir,
                                                tmp_path_factory) -> None:
    dirs = {name: tmp_path_factory.mktemp(f"data-{name}") for name in ("api", "worker", "api2")}
    common = {**s3_env, "SODM_CELERY_QUEUE": f"sodm-s3-{uuid.uuid4().hex[:8]}",
              "SODM_SPARK_MASTER": "local[2]", "SPARK_LOCAL_IP": "127.0.0.1"}
    starter = _Starter(stack_env, tmp_path_factory)
    api = _start(stack_env, tmp_path_factory.mktemp("api-s3"),
                 {**common, "SODM_DATA_DIR": str(dirs["api"])})
    api2 = None
    try:
        starter(**common, SODM_DATA_DIR=str(dirs["worker"]))
        ds = upload_as(api.url, tenant, datasets_dir, "heart_scale")
        assert sorted(_keys(s3_env, f"sodm/datasets/{ds['id']}/")) == [
            f"sodm/datasets/{ds['id']}/data.parquet", f"sodm/datasets/{ds['id']}/meta.json"]
        X, _ = load_libsvm(datasets_dir, "heart_scale", n_features=13)
        auth = {"Authorization": f"Bearer {tenant[1]}"}
        with httpx.Client(base_url=api.url, timeout=120, headers=auth) as c:
            models = {}
            for backend in ("local", "spark"):
                job = submit(c, {"dataset_id": ds["id"], "algorithm": "sodm",
                                 "backend": backend, "seed": 5, "test_fraction": 0.2,
                                 "params": {"kernel": "rbf", "gamma": 0.5, "lam": 100.0,
                                            "theta": 0.2, "levels": 1, "n_strata": 4},
                                 "name": f"s3-{backend}"})
                done = wait_job(c, job["id"], timeout=600)
                assert done["state"] == "SUCCEEDED", done["error"]
                models[backend] = done["model_id"]
            rows = {"instances": X[:20].tolist()}
            answers = {b: c.post("/predict", json={"model_id": m, **rows}).json()
                       for b, m in models.items()}
            np.testing.assert_allclose(answers["spark"]["decision_values"],
                                       answers["local"]["decision_values"], rtol=1e-6)
            r = c.post("/predictions", json={"model_id": models["local"], "dataset_id": ds["id"]})
            assert r.status_code == 202, r.text
            batch = wait_job(c, r.json()["id"], timeout=300)
            assert batch["state"] == "SUCCEEDED", batch["error"]
            assert _keys(s3_env, f"sodm/predictions/{batch['id']}") == [
                f"sodm/predictions/{batch['id']}.parquet"]
            whole = c.get(f"/predictions/{batch['id']}/result")
            assert whole.status_code == 200 and whole.headers["accept-ranges"] == "bytes"
            table = pq.read_table(io.BytesIO(whole.content))
            assert table.num_rows == len(X)
            np.testing.assert_allclose(table.column("decision_value").to_numpy()[:20],
                                       answers["local"]["decision_values"], rtol=1e-9)
            part = c.get(f"/predictions/{batch['id']}/result", headers={"Range": "bytes=4-99"})
            assert part.status_code == 206 and part.content == whole.content[4:100]
            assert part.headers["content-range"] == f"bytes 4-99/{len(whole.content)}"
            past = c.get(f"/predictions/{batch['id']}/result",
                         headers={"Range": f"bytes={len(whole.content)}-"})
            assert past.status_code == 416 and past.headers["content-type"].startswith(
                "application/problem+json")
            csv = c.get(f"/predictions/{batch['id']}/result?format=csv").text.splitlines()
            assert len(csv) == len(X) + 1 and csv[0].startswith('"row_id"')
        api2 = _start(stack_env, tmp_path_factory.mktemp("api2-s3"),
                      {**common, "SODM_DATA_DIR": str(dirs["api2"])})
        with httpx.Client(base_url=api2.url, timeout=120, headers=auth) as c2:
            again = c2.post("/predict", json={"model_id": models["spark"], **rows}).json()
            assert again["decision_values"] == answers["spark"]["decision_values"]
            assert c2.get(f"/predictions/{batch['id']}/result").content == whole.content
            assert c2.get(f"/models/{models['local']}/onnx").status_code == 200
            assert c2.delete(f"/datasets/{ds['id']}").status_code == 204
        assert _keys(s3_env, f"sodm/datasets/{ds['id']}/") == []
        for name, d in dirs.items():
            assert _stored_files(d) == [], name
    finally:
        starter.close()
        api.stop()
        if api2 is not None:
            api2.stop()


def test_migrate_creates_the_bucket_when_the_url_allows(s3_env, stack_env) -> None:
    """``sodm migrate`` creates a missing bucket when ``SODM_STORAGE_URL`` says
    ``allow_bucket_creation=true``; without it, it exits 2 with one line naming the bucket."""
    import os

    url = s3_env["SODM_STORAGE_URL"].replace(f"s3://{BUCKET}/", "s3://fresh-bucket/")
    env = {**os.environ, **stack_env, **s3_env}
    refused = subprocess.run([sys.executable, "-m", "app.cli", "migrate"],
                             env={**env, "SODM_STORAGE_URL": url}, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "'fresh-bucket'" in refused.stderr and "Traceback" not in refused.stderr
    made = subprocess.run([sys.executable, "-m", "app.cli", "migrate"],
                          env={**env, "SODM_STORAGE_URL": url + "&allow_bucket_creation=true"},
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    assert "fresh-bucket" in {b["Name"] for b in _s3(s3_env).list_buckets()["Buckets"]}
