"""``Client``: the sodm API from Python, on httpx alone.

Every call returns the API's JSON body as the TypedDict of its OpenAPI schema
(``sodm_client.types``) or raises ``SodmError`` with the RFC 9457 problem. A 429 or 503
that carries ``Retry-After`` is retried after that many seconds (at most ``max_retries``
times, each wait at most ``max_retry_wait``), uploads included (the file is read again).
Long work follows the service's server-sent events: ``wait_job`` and ``wait_prediction``
read ``/events`` (reconnecting if the stream breaks) until the job ends.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import IO, Any, cast

import httpx

from sodm_client.errors import SodmError
from sodm_client.types import (
    AliasOut,
    DatasetOut,
    JobOut,
    ModelOut,
    PredictionJobOut,
    PredictResponse,
)

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
RETRIED = frozenset({429, 503})
Progress = Callable[[int, int], None]  # (bytes sent, bytes in all)
OnEvent = Callable[[str, dict[str, Any]], None]  # (event name, its data)


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delay-seconds or an HTTP date)."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def problem_of(response: httpx.Response) -> dict[str, Any]:
    """The response's problem body, or one made from its status and text."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and ("title" in body or "type" in body):
        return body
    if isinstance(body, dict) and "error" in body:  # the /v2 routes' shape
        return {"type": "about:blank", "title": response.reason_phrase,
                "status": response.status_code, "detail": str(body["error"])}
    return {"type": "about:blank", "title": response.reason_phrase or "Error",
            "status": response.status_code, "detail": response.text[:1000] or None}


class _ProgressFile:
    """A file whose reads report how much of it has been sent."""

    def __init__(self, fh: IO[bytes], total: int, progress: Progress | None) -> None:
        self.fh, self.total, self.progress, self.sent = fh, total, progress, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.fh.read(size)
        self.sent += len(chunk)
        if self.progress is not None and chunk:
            self.progress(self.sent, self.total)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        self.sent = 0 if offset == 0 and whence == 0 else self.sent
        return self.fh.seek(offset, whence)

    def tell(self) -> int:
        return self.fh.tell()

    def fileno(self) -> int:  # lets httpx send a Content-Length
        return self.fh.fileno()


def _sse(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a server-sent event stream."""
    event, data = "message", []
    for line in response.iter_lines():
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


class Client:
    """A session with one sodm service and one API key (``Authorization: Bearer``)."""

    def __init__(self, base_url: str, key: str, *, timeout: float = 60.0,
                 max_retries: int = 5, max_retry_wait: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep,
                 http: httpx.Client | None = None) -> None:
        self.http = http or httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self.http.headers["Authorization"] = f"Bearer {key}"
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.sleep = sleep

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport
    def _wait_for(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying ``response``, or None to give up."""
        if response.status_code not in RETRIED or attempt >= self.max_retries:
            return None
        wait = retry_after(response.headers.get("retry-after"))
        return wait if wait is not None and wait <= self.max_retry_wait else None

    def request(self, method: str, path: str,
                body: Callable[[], dict[str, Any]] | None = None, **kwargs: Any
                ) -> httpx.Response:
        """One API call, retried on 429/503 with ``Retry-After``; ``body`` makes the
        request's content anew for each try (a file is read again)."""
        attempt = 0
        while True:
            r = self.http.request(method, path, **kwargs, **(body() if body else {}))
            wait = self._wait_for(r, attempt)
            if wait is None:
                break
            attempt += 1
            self.sleep(wait)
        if not r.is_success:
            raise SodmError(problem_of(r), r.status_code)
        return r

    @contextlib.contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        """A streamed answer (events, downloads), retried as ``request``."""
        attempt = 0
        while True:
            with self.http.stream(method, path, **kwargs) as r:
                wait = self._wait_for(r, attempt)
                if wait is None:
                    if not r.is_success:
                        r.read()
                        raise SodmError(problem_of(r), r.status_code)
                    yield r
                    return
            attempt += 1
            self.sleep(wait)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def _pages(self, path: str, params: Mapping[str, Any]) -> Iterator[Any]:
        cursor = None
        while True:
            page = self._json("GET", path, params={
                **{k: v for k, v in params.items() if v is not None},
                **({"cursor": cursor} if cursor else {})})
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    # ---------------------------------------------------------------- datasets
    def upload(self, path: str | Path, *, format: str | None = None,  # noqa: A002
               name: str | None = None, label_column: str | None = None,
               wait: float | None = None, progress: Progress | None = None,
               poll_seconds: float = 0.5) -> DatasetOut:
        """Upload a dataset file (LIBSVM, CSV, Parquet; ``.gz``/``.xz`` too) and return it
        once parsed; ``progress(sent, total)`` follows the bytes sent. A refused file
        raises ``SodmError`` with the problem naming the line or limit."""
        path = Path(path)
        total = path.stat().st_size
        fields = {k: v for k, v in (("format", format), ("name", name),
                                    ("label_column", label_column)) if v is not None}
        opened: list[IO[bytes]] = []

        def body() -> dict[str, Any]:
            for fh in opened:
                fh.close()
            opened.append(path.open("rb"))
            return {"files": {"file": (path.name, _ProgressFile(opened[-1], total, progress))},
                    "data": fields}

        try:
            ds = self.request("POST", "/datasets", body=body,
                              params={} if wait is None else {"wait": wait}).json()
        finally:
            for fh in opened:
                fh.close()
        while ds["state"] == "parsing":
            self.sleep(poll_seconds)
            ds = self.get_dataset(ds["id"])
        if ds["state"] == "failed":
            raise SodmError(ds.get("problem") or {"title": "Dataset failed"})
        return cast(DatasetOut, ds)

    def get_dataset(self, dataset_id: str) -> DatasetOut:
        return cast(DatasetOut, self._json("GET", f"/datasets/{dataset_id}"))

    def list_datasets(self) -> Iterator[DatasetOut]:
        return self._pages("/datasets", {})

    def delete_dataset(self, dataset_id: str) -> None:
        self.request("DELETE", f"/datasets/{dataset_id}")

    # -------------------------------------------------------------------- jobs
    def train(self, dataset_id: str, algorithm: str = "sodm", *,
              params: Mapping[str, Any] | None = None, name: str | None = None,
              **request: Any) -> JobOut:
        """Queue a training job (``POST /train``; ``request``: ``test_fraction``,
        ``seed``, ``backend``, ``search``, ``test_dataset_id``, ``class_weight``,
        ``weight_column``, ...)."""
        body = {"dataset_id": dataset_id, "algorithm": algorithm, "params": dict(params or {}),
                **({"name": name} if name else {}), **request}
        return cast(JobOut, self._json("POST", "/train", json=body))

    def get_job(self, job_id: str) -> JobOut:
        return cast(JobOut, self._json("GET", f"/jobs/{job_id}"))

    def list_jobs(self, **filters: Any) -> Iterator[JobOut]:
        return self._pages("/jobs", filters)

    def cancel_job(self, job_id: str) -> JobOut:
        return cast(JobOut, self._json("POST", f"/jobs/{job_id}/cancel"))

    def _follow(self, events: str, job_id: str, read: Callable[[], Any],
                on_event: OnEvent | None, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            endless = httpx.Timeout(self.http.timeout.connect, read=None)
            # a broken stream: reconnect (after reading the job's state)
            with contextlib.suppress(httpx.TransportError), \
                    self.stream("GET", events, timeout=endless) as r:
                for event, data in _sse(r):
                    if on_event is not None:
                        on_event(event, data)
                    if event == "error":
                        raise SodmError(data)
            job = read()
            if job["state"] in TERMINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise SodmError({"type": "about:blank", "title": "Timeout",
                                 "detail": f"job {job_id} still {job['state']} after "
                                           f"{timeout} s"}, 0)
            self.sleep(1.0)

    def wait_job(self, job_id: str, on_event: OnEvent | None = None,
                 timeout: float | None = None) -> JobOut:
        """Follow ``/jobs/{id}/events`` until the job ends; its final state."""
        return cast(JobOut, self._follow(f"/jobs/{job_id}/events", job_id,
                                         lambda: self.get_job(job_id), on_event, timeout))

    def train_and_wait(self, dataset_id: str, algorithm: str = "sodm", *,
                       on_event: OnEvent | None = None, timeout: float | None = None,
                       **train: Any) -> ModelOut:
        """``train``, ``wait_job``, then the model; a failed or cancelled job raises
        ``SodmError`` with the job's problem."""
        job = self.wait_job(self.train(dataset_id, algorithm, **train)["id"], on_event,
                            timeout)
        if job["state"] != "SUCCEEDED":
            raise SodmError(job.get("error") or {"type": "about:blank",
                                                 "title": f"Job {job['state'].lower()}",
                                                 "detail": f"job {job['id']}"}, 0)
        return self.get_model(cast(str, job["model_id"]))

    # ------------------------------------------------------------- predictions
    def predict(self, instances: Sequence[Any] | Any, *, model: str | None = None,
                model_id: str | None = None) -> PredictResponse:
        """Labels, decision values (and probabilities) of rows: lists, ``{index: value}``
        or ``{feature name: value}`` objects, or an array with ``tolist()``. The model by
        ``model_id``, or ``model`` as ``name``, ``name@3``, ``name@alias``."""
        rows = instances.tolist() if hasattr(instances, "tolist") else list(instances)
        ref = {"model": model} if model is not None else {"model_id": model_id}
        return cast(PredictResponse, self._json("POST", "/predict",
                                                json={**ref, "instances": rows}))

    def create_prediction(self, dataset_id: str, *, model: str | None = None,
                          model_id: str | None = None) -> PredictionJobOut:
        """A batch prediction job over a stored dataset (``POST /predictions``)."""
        ref = {"model": model} if model is not None else {"model_id": model_id}
        return cast(PredictionJobOut, self._json("POST", "/predictions",
                                                 json={**ref, "dataset_id": dataset_id}))

    def get_prediction(self, job_id: str) -> PredictionJobOut:
        return cast(PredictionJobOut, self._json("GET", f"/predictions/{job_id}"))

    def wait_prediction(self, job_id: str, on_event: OnEvent | None = None,
                        timeout: float | None = None) -> PredictionJobOut:
        """Follow ``/predictions/{id}/events`` until the job ends; its final state."""
        return cast(PredictionJobOut, self._follow(
            f"/predictions/{job_id}/events", job_id, lambda: self.get_prediction(job_id),
            on_event, timeout))

    def download_prediction(self, job_id: str, path: str | Path,
                            format: str = "parquet") -> Path:  # noqa: A002
        """Save a finished batch prediction's result (``parquet`` or ``csv``)."""
        return self._download(f"/predictions/{job_id}/result", path, {"format": format})

    def _download(self, url: str, path: str | Path, params: Mapping[str, Any] | None = None
                  ) -> Path:
        path = Path(path)
        with self.stream("GET", url, params=params) as r, path.open("wb") as fh:
            for chunk in r.iter_bytes():
                fh.write(chunk)
        return path

    # ---------------------------------------------------------------- registry
    def list_models(self, *, name: str | None = None, dataset_id: str | None = None,
                    alias: str | None = None, tags: Sequence[str] = ()) -> Iterator[ModelOut]:
        """Live model versions, newest first, filtered (every tag given)."""
        return self._pages("/models", {"name": name, "dataset_id": dataset_id,
                                       "alias": alias, "tag": list(tags) or None})

    def get_model(self, model_id: str) -> ModelOut:
        return cast(ModelOut, self._json("GET", f"/models/{model_id}"))

    def update_model(self, model_id: str, *, description: str | None = None,
                     tags: Sequence[str] | None = None) -> ModelOut:
        body = {k: v for k, v in (("description", description),
                                  ("tags", None if tags is None else list(tags)))
                if v is not None}
        return cast(ModelOut, self._json("PATCH", f"/models/{model_id}", json=body))

    def delete_model(self, model_id: str) -> None:
        self.request("DELETE", f"/models/{model_id}")

    def download_model(self, model_id: str, path: str | Path, onnx: bool = False) -> Path:
        """The model file (``solver.io.model_io.load_model`` reads it) or its ONNX graph."""
        return self._download(f"/models/{model_id}/{'onnx' if onnx else 'file'}", path)

    def list_aliases(self, name: str) -> list[AliasOut]:
        return cast(list[AliasOut], self._json("GET", f"/models/{name}/aliases")["items"])

    def set_alias(self, name: str, alias: str, *, version: int | None = None,
                  model_id: str | None = None) -> AliasOut:
        """Point ``name@alias`` at a version (by number or model id)."""
        body = {"version": version} if version is not None else {"model_id": model_id}
        return cast(AliasOut, self._json("PUT", f"/models/{name}/aliases/{alias}", json=body))

    def delete_alias(self, name: str, alias: str) -> None:
        self.request("DELETE", f"/models/{name}/aliases/{alias}")
