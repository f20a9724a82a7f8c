"""Routes: ``/datasets`` upload (streamed multipart), list, detail, delete.

The upload body is parsed as it arrives (python-multipart's streaming parser): the file part
goes straight to the upload's own directory (``tmp/upload-{id}/``,
``app.services.data.upload_dirs``) while its size is counted, so an oversized upload is cut off
at the limit (413) or at the tenant's storage quota (507) instead of being spooled in full
first. No parse slot is held meanwhile: once the whole body is on disk the row is inserted
and the upload waits for a fair slot (``app.services.data.ingest_queue``), then is parsed in a
child process (``app.services.data.ingest_process``); the request waits for it up to ``?wait=``
seconds: 201 (ready) or the refusal's 4xx, else 202 (parsing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from pathlib import Path
from typing import IO, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from python_multipart.multipart import MultipartParser, parse_options_header
from sqlalchemy.orm import Session
from starlette.requests import ClientDisconnect

from app.api.auth import current_tenant
from app.core.config import get_settings
from app.core.db import get_session, get_sessionmaker
from app.core.observability import DATASET_UPLOADS
from app.core.orm import Tenant, new_id
from app.core.problems import ProblemError
from app.schemas.common import IdPath, problem_responses
from app.schemas.datasets import DatasetList, DatasetOut
from app.services.data import dataset_catalog as datasets_service
from app.services.data import ingest, ingest_process, ingest_queue
from app.services.data.upload_dirs import UploadDir
from app.services.filestore import storage
from app.services.tenancy import quotas

router = APIRouter(tags=["datasets"])

MAX_FIELD_BYTES = 4096
FORM_OVERHEAD_BYTES = 64 * 1024  # multipart headers + small fields on top of the file
TEXT_FIELDS = ("format", "name", "label_column", "n_features")

_UPLOAD_SCHEMA = {
    "requestBody": {
        "required": True,
        "content": {"multipart/form-data": {"schema": {
            "type": "object", "required": ["file"],
            "properties": {
                "file": {"type": "string", "format": "binary",
                         "description": "the data (optionally .gz/.xz compressed)"},
                "format": {"type": "string", "enum": ["csv", "libsvm", "parquet"],
                           "description": "inferred from the file name when absent"},
                "name": {"type": "string"},
                "label_column": {"type": "string", "default": "label",
                                 "description": "csv / parquet label column"},
                "n_features": {"type": "integer", "minimum": 1,
                               "description": "libsvm: total feature count when the file's "
                                              "largest index is smaller (a test split)"},
            }}}},
    }
}


def _too_large(limit: int) -> ProblemError:
    return ProblemError(413, "Upload too large",
                        detail=f"the file exceeds the upload limit of {limit} bytes",
                        type="upload-too-large", limit_bytes=limit)


class _FormReceiver:
    """Callbacks for ``MultipartParser``: the ``file`` part to the upload's directory,
    small text fields to memory; enforces the file size limit and the tenant's storage
    headroom (None: no quota) as bytes arrive."""

    def __init__(self, limit: int, upload: UploadDir, headroom: int | None) -> None:
        self.limit = limit
        self.upload = upload
        self.headroom = headroom
        self.fields: dict[str, str] = {}
        self.file_path: Path | None = None
        self.filename: str | None = None
        self.file_bytes = 0
        self.sha = hashlib.sha256()
        self._fh: IO[bytes] | None = None
        self._headers: dict[str, str] = {}
        self._hname = b""
        self._hvalue = b""
        self._part: str | None = None
        self._is_file = False
        self._buf = bytearray()

    def callbacks(self) -> dict[str, Any]:
        return {"on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._data,
                "on_part_end": self._part_end}

    def _part_begin(self) -> None:
        self._headers, self._part, self._is_file = {}, None, False
        self._buf = bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._hname += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._hvalue += data[start:end]

    def _header_end(self) -> None:
        self._headers[self._hname.decode("latin-1").lower()] = self._hvalue.decode("latin-1")
        self._hname, self._hvalue = b"", b""

    def _headers_finished(self) -> None:
        _, params = parse_options_header(self._headers.get("content-disposition", ""))
        self._part = params.get(b"name", b"").decode("utf-8", "replace")
        if self._part == "file":
            if self.file_path is not None:
                raise ProblemError(422, "Request validation failed",
                                   detail="send exactly one file part", type="validation-error",
                                   errors=[{"field": "file", "message": "more than one file"}])
            self._is_file = True
            raw = params.get(b"filename")
            self.filename = raw.decode("utf-8", "replace") if raw is not None else None
            with storage.storage_errors():
                self.file_path = self.upload.body
                self._fh = open(self.file_path, "wb")  # noqa: SIM115 - closed in _part_end

    def _data(self, data: bytes, start: int, end: int) -> None:
        chunk = data[start:end]
        if self._is_file:
            self.file_bytes += len(chunk)
            if self.file_bytes > self.limit:
                raise _too_large(self.limit)
            if self.headroom is not None and self.file_bytes > self.headroom:
                quota = get_settings().quota_storage_mb * quotas.MB
                raise quotas.storage_problem(quota, quota - self.headroom + self.file_bytes)
            self.sha.update(chunk)
            with storage.storage_errors():
                self._fh.write(chunk)  # type: ignore[union-attr]
        else:
            self._buf += chunk
            if len(self._buf) > MAX_FIELD_BYTES:
                raise ProblemError(422, "Request validation failed",
                                   detail=f"form field {self._part!r} is too long",
                                   type="validation-error",
                                   errors=[{"field": self._part, "message": "too long"}])

    def _part_end(self) -> None:
        if self._is_file and self._fh is not None:
            with storage.storage_errors():
                self._fh.close()
            self._fh = None
        elif self._part in TEXT_FIELDS:
            value = self._buf.decode("utf-8", "replace").strip()
            if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
                raise ProblemError(422, "Request validation failed",
                                   detail=f"form field {self._part!r} contains control "
                                   "characters", type="validation-error", field=self._part,
                                   errors=[{"field": self._part,
                                            "message": "control characters are not allowed"}])
            self.fields[self._part] = value

    def close(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


def _n_features(raw: str | None) -> int | None:
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= 100_000_000:
        raise ProblemError(422, "Request validation failed",
                           detail="n_features must be a positive integer",
                           type="validation-error",
                           errors=[{"location": ["body", "n_features"], "field": "n_features",
                                    "message": "a positive integer"}])
    return int(raw)


def _begin(tenant: Tenant, rx: _FormReceiver) -> ingest_process.IngestRequest:
    """Check the form (cheap), insert the row in state parsing: what the child gets."""
    n_features = _n_features(rx.fields.get("n_features"))
    fmt = ingest.infer_format(rx.fields.get("format") or None, rx.filename)
    with get_sessionmaker()() as session:
        quotas.check_storage(session, tenant.id, incoming=rx.file_bytes)
        ds = datasets_service.begin_dataset(
            session, tenant, filename=rx.filename, fmt=fmt, name=rx.fields.get("name"),
            sha256=rx.sha.hexdigest(), size_bytes=rx.file_bytes,
            dataset_id=rx.upload.dataset_id)
    return ingest_process.IngestRequest(
        dataset_id=ds.id, tenant_id=tenant.id, fmt=fmt,
        label_column=rx.fields.get("label_column") or "label", n_features=n_features,
        sha256=rx.sha.hexdigest())


def _settle(dataset_id: str) -> dict[str, Any]:
    with get_sessionmaker()() as session:
        ds = datasets_service.settle(session, dataset_id)
        if ds is None:  # deleted by its owner while it was parsed
            raise ProblemError(404, "Dataset not found", detail=f"no dataset {dataset_id!r}",
                               type="not-found")
        return datasets_service.dataset_out(ds)


async def _receive(request: Request, rx: _FormReceiver, boundary: bytes) -> None:
    """The whole multipart body, the file part on disk."""
    parser = MultipartParser(boundary, rx.callbacks())
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    except ClientDisconnect as exc:
        raise ProblemError(400, "Upload interrupted", detail="the client disconnected",
                           type="upload-interrupted") from exc
    except ProblemError:
        raise
    except Exception as exc:  # noqa: BLE001 - malformed multipart framing
        raise ProblemError(400, "Malformed multipart body", detail=type(exc).__name__,
                           type="malformed-multipart") from exc
    finally:
        rx.close()
    if rx.file_path is None:
        raise ProblemError(422, "Request validation failed", detail="the 'file' part is "
                           "missing", type="validation-error",
                           errors=[{"location": ["body", "file"], "field": "file",
                                    "message": "Field required"}])


@router.post("/datasets", status_code=201, response_model=DatasetOut,
             openapi_extra=_UPLOAD_SCHEMA,
             responses={202: {"model": DatasetOut,
                              "description": "still parsing: poll the Location until its "
                                             "state is ready or failed"},
                        **problem_responses(401, 413, 415, 422, 429, 500, 503, 507)})
async def upload_dataset(request: Request, response: Response,
                         wait: float | None = Query(
                             default=None, ge=0, le=300,
                             description="seconds to wait for the parse (default "
                                         "SODM_INGEST_WAIT_SECONDS)"),
                         tenant: Tenant = Depends(current_tenant)) -> dict[str, Any]:
    """Upload a dataset (multipart ``file``, ``format``, ``name``, ``label_column``). Once
    the body is stored the parse waits for a fair slot and runs in a child process; within
    ``wait`` seconds the answer is 201 with the stored dataset (or the refusal's 4xx,
    nothing kept), later 202 with ``state: parsing``. Both carry the dataset's
    ``Location``."""
    settings = get_settings()
    limit = settings.max_upload_bytes
    ctype, params = parse_options_header(request.headers.get("content-type", ""))
    if ctype != b"multipart/form-data" or not params.get(b"boundary"):
        raise ProblemError(415, "Unsupported media type",
                           detail="send multipart/form-data with a 'file' part",
                           type="unsupported-media-type")
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isascii() and length.isdigit() else 0
    if declared > limit + FORM_OVERHEAD_BYTES:
        DATASET_UPLOADS.labels("too_large").inc()
        raise _too_large(limit)
    ingest_queue.check_room(tenant.id)
    headroom = await run_in_threadpool(quotas.storage_headroom, tenant.id,
                                       max(0, declared - FORM_OVERHEAD_BYTES))
    upload = await run_in_threadpool(UploadDir.create, new_id())
    rx = _FormReceiver(limit, upload, headroom)
    handed = False
    try:
        await _receive(request, rx, params[b"boundary"])
        req = await run_in_threadpool(_begin, tenant, rx)
        done = ingest_queue.submit(req)  # the queue, then the child, own the upload now
        handed = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(done)),
                                   settings.ingest_wait_seconds if wait is None else wait)
        out = await run_in_threadpool(_settle, req.dataset_id)
    except ProblemError as exc:
        DATASET_UPLOADS.labels("too_large" if exc.status == 413 else "rejected").inc()
        raise
    finally:
        if not handed:  # no await here: it runs even when the request is cancelled
            upload.remove()
    DATASET_UPLOADS.labels("stored" if out["state"] == "ready" else "parsing").inc()
    response.headers["Location"] = f"/datasets/{out['id']}"
    if out["state"] != "ready":
        response.status_code = 202
    return out


@router.get("/datasets", response_model=DatasetList, responses=problem_responses(401, 422))
def list_datasets(cursor: str | None = None, limit: int = Query(default=50, ge=1, le=500),
                  tenant: Tenant = Depends(current_tenant),
                  session: Session = Depends(get_session)) -> dict[str, Any]:
    """This tenant's datasets, newest first; pass ``next_cursor`` back as ``cursor``."""
    rows, next_cursor = datasets_service.list_datasets(session, tenant, cursor, limit)
    return {"items": datasets_service.datasets_out(session, rows), "next_cursor": next_cursor}


@router.get("/datasets/{dataset_id}", response_model=DatasetOut,
            responses=problem_responses(401, 404))
def get_dataset(dataset_id: IdPath, tenant: Tenant = Depends(current_tenant),
                session: Session = Depends(get_session)) -> dict[str, Any]:
    return datasets_service.dataset_out(datasets_service.get_dataset(session, tenant, dataset_id))


@router.delete("/datasets/{dataset_id}", status_code=204, response_class=Response,
               responses=problem_responses(401, 404, 409))
def delete_dataset(dataset_id: IdPath, tenant: Tenant = Depends(current_tenant),
                   session: Session = Depends(get_session)) -> Response:
    """Delete the dataset (row soft-deleted, files removed); 409 while a job uses it."""
    datasets_service.delete_dataset(session, tenant, dataset_id)
    return Response(status_code=204)
