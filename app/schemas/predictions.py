"""Request and response bodies of the batch prediction jobs (``/predictions``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.core.orm import JobState
from app.schemas.common import ID_PATTERN, StoredBody
from app.schemas.jobs import JobOut, Progress


class PredictionRequest(StoredBody):
    """``POST /predictions``: a model (by id or reference) over a stored dataset."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), json_schema_extra={
        "examples": [{"model": "churn@champion",
                      "dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21"}]})

    dataset_id: str = Field(min_length=1, max_length=64, pattern=ID_PATTERN)
    model_id: str | None = Field(default=None, max_length=64, pattern=ID_PATTERN)
    model: str | None = Field(default=None, max_length=270, pattern=r"^[^\x00-\x1f\x7f]+$",
                              description='"name", "name@latest", "name@3" or "name@alias" '
                              '(resolved when the job is created)')


class PredictionResult(BaseModel):
    rows: int
    seconds: float
    bytes: int = Field(description="size of the Parquet file")
    rows_out_of_range: int = Field(default=0, description="rows whose decision value is not "
                                   "finite (inputs such as 1e308 overflow the model's kernel "
                                   "sum): their label and decision values are null")
    out_of_range_row_ids: list[int] = Field(default_factory=list, description="the row_id of "
                                            "the first 100 of them")


class PredictionJobOut(BaseModel):
    """A batch prediction job: its model (resolved at creation), dataset, state, progress
    and, once SUCCEEDED, the result's size and download links (Parquet or CSV)."""

    model_config = ConfigDict(protected_namespaces=(), json_schema_extra={"examples": [{
        "kind": "predict", "id": "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", "state": "SUCCEEDED",
        "model_id": "9b1d2c3e-4f5a-4b6c-8d7e-0f1a2b3c4d5e", "model_name": "churn",
        "version": 3, "dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21",
        "progress": {"fraction": 1.0, "message": "predicted 250,000 of 250,000 rows"},
        "rows_total": 250000, "rows_done": 250000,
        "result": {"rows": 250000, "seconds": 3.1, "bytes": 4821337,
                   "rows_out_of_range": 0, "out_of_range_row_ids": []}, "error": None,
        "attempt": 1, "created_at": "2026-11-25T10:00:00Z",
        "started_at": "2026-11-25T10:00:01Z", "finished_at": "2026-11-25T10:00:04Z",
        "links": {"self": "/predictions/5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9",
                  "parquet": "/predictions/5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9/result"
                             "?format=parquet",
                  "csv": "/predictions/5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9/result?format=csv"}}]})

    kind: Literal["predict"] = Field(default="predict", description="a batch prediction job "
                                     "(GET /jobs/{id} answers with either kind)")
    id: str
    state: JobState
    model_id: str
    model_name: str | None
    version: int | None
    dataset_id: str
    progress: Progress
    rows_total: int | None = Field(description="rows of the dataset (None for jobs created "
                                   "before the count was recorded)")
    rows_done: int | None = Field(description="rows predicted so far (all of them once "
                                  "SUCCEEDED)")
    result: PredictionResult | None
    error: dict[str, Any] | None
    attempt: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    links: dict[str, str]


AnyJobOut = Annotated[JobOut | PredictionJobOut, Field(discriminator="kind")]
"""``GET /jobs/{id}``: a training job or a batch prediction job, told apart by ``kind``."""


class PredictionJobList(BaseModel):
    items: list[PredictionJobOut]
    next_cursor: str | None
