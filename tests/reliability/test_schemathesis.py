"""Schemathesis against the live OpenAPI schema of a real uvicorn process: for every
operation a bounded, derandomized set of generated requests (valid and invalid), sent with
a tenant's key, must never get a 5xx and every response must match the schema (documented
status code, content type and body)."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# /predict's binary bodies (.npy, Arrow IPC) are sent as the bytes generated or given
schemathesis.serializer.alias(["application/x-npy", "application/vnd.apache.arrow.stream"],
                              "application/octet-stream")

# examples per operation and mode; SODM_SCHEMATHESIS_EXAMPLES raises it for a longer run
EXAMPLES = int(os.environ.get("SODM_SCHEMATHESIS_EXAMPLES", "25"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                         ids=["positive", "negative"])
def test_openapi_schema_fuzz(api_server: str, tenant: tuple[str, str], mode) -> None:
    schema = schemathesis.openapi.from_url(api_server + "/openapi.json")
    auth = {"Authorization": f"Bearer {tenant[1]}"}
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 15
    failures: list[str] = []
    for op in operations:
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=mode, headers=auth))
        def run(case) -> None:
            case.call_and_validate(base_url=api_server, headers=auth, checks=CHECKS,
                                   timeout=30)

        try:
            run()
        except Unsatisfiable:
            # no parameters or body to make invalid (GET /livez, ...): nothing negative to send
            assert mode == GenerationMode.NEGATIVE and not op.path_parameters \
                and not list(op.body), f"{op.method.upper()} {op.path}"
            continue
        except Exception as exc:  # noqa: BLE001 - collect every failing operation
            failures.append(f"{op.method.upper()} {op.path}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)


def _npy_header(shape: tuple[int, ...]) -> bytes:
    """A ``.npy`` header of float64 ``shape`` (no data): what a client declares."""
    text = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}".encode()
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


def test_known_hostile_families(api_server: str, tenant: tuple[str, str], datasets_dir) -> None:
    """The families of issue 36 as explicit cases through the same checks: a LIBSVM file of
    NUL bytes (was 500 ingest-crashed), a ``.npy`` header declaring 10^12 rows (was a 500),
    parameters that passed and failed in the worker (now 422 at POST /train)."""
    from tests.service.jobs_helpers import upload_as

    schema = schemathesis.openapi.from_url(api_server + "/openapi.json")
    auth = {"Authorization": f"Bearer {tenant[1]}"}
    heart = upload_as(api_server, tenant, datasets_dir, "heart_scale")
    train = schema["/train"]["POST"]
    cases = [
        (schema["/datasets"]["POST"].Case(
            body={"file": b"\x00" * (100 << 10), "format": "libsvm"},
            media_type="multipart/form-data"), 413),
        (schema["/predict"]["POST"].Case(
            body=_npy_header((10 ** 12, 13)) + b"\x00" * 104, media_type="application/x-npy",
            query={"model_id": "00000000-0000-4000-8000-000000000000"}), 413),
        (train.Case(body={"dataset_id": heart["id"], "params": {"kernel": "poly",
                                                                 "coef0": 1e308}},
                    media_type="application/json"), 422),
        (train.Case(body={"dataset_id": heart["id"], "params": {"kernel": "poly", "gamma": 1,
                                                                 "coef0": 1e11}},
                    media_type="application/json"), 422),
        (train.Case(body={"dataset_id": heart["id"], "params": {"kernel": "linear",
                                                                 "upsilon": 1e308}},
                    media_type="application/json"), 422),
        (train.Case(body={"dataset_id": heart["id"], "test_fraction": 0.999},
                    media_type="application/json"), 422),
    ]
    for case, status in cases:
        case.headers = {**(case.headers or {}), **auth}
        r = case.call_and_validate(base_url=api_server, headers=auth, checks=CHECKS, timeout=60)
        assert r.status_code == status, (case.path, r.status_code, r.text[:500])
