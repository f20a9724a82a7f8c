"""Request and response bodies of ``POST /train`` and the ``/jobs`` resources."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import ID_PATTERN

Algorithm = Literal["sodm", "odm", "cascade", "dip", "dc", "svrg"]


class SearchSpec(BaseModel):
    """Grid search with stratified k-fold cross-validation on the training part."""

    model_config = ConfigDict(extra="forbid")

    grid: dict[str, list[Any]] = Field(min_length=1)
    folds: int = Field(default=3, ge=2, le=20)


class TrainRequest(BaseModel):
    """Body of ``POST /train``. Unknown top-level keys are rejected (422)."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=64, pattern=ID_PATTERN)
    algorithm: Algorithm = Field(
        default="sodm", description="sodm, odm, or a baseline: cascade (Ca-ODM), dip "
        "(DiP-ODM), dc (DC-ODM), svrg (ODM-SVRG, linear kernel)")
    params: dict[str, Any] = Field(
        default_factory=dict, description="estimator keyword arguments, validated by the "
        "estimator (unknown keys and bad values: 422 naming the field); random_state "
        "defaults to seed")
    backend: Literal["local", "spark"] = Field(
        default="local", description="spark needs SODM_SPARK_REMOTE or SODM_SPARK_MASTER")
    test_dataset_id: str | None = Field(default=None, max_length=64, pattern=ID_PATTERN,
                                        description="held-out dataset for the metrics")
    test_fraction: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="stratified held-out fraction (by seed) "
        "when no test_dataset_id; 0.2 when neither is given")
    seed: int = Field(default=0, ge=0, le=2**31 - 1,
                      description="split, CV folds and solver randomness")
    search: SearchSpec | None = Field(
        default=None, description="grid search by k-fold CV accuracy on the training part; "
        "the best point is refitted on the whole training part (local backend only)")
    name: str | None = Field(default=None, min_length=1, max_length=200,
                             pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                             description="model name (versions increase per name); default "
                             "<dataset name>-<algorithm>")


class Progress(BaseModel):
    fraction: float
    message: str


class JobOut(BaseModel):
    """A training job as the API shows it."""

    id: str
    state: str
    dataset_id: str
    test_dataset_id: str | None
    algorithm: str
    backend: str
    params: dict[str, Any]
    request: dict[str, Any]
    name: str | None
    progress: Progress
    history: list[dict[str, Any]]
    attempt: int
    max_attempts: int
    model_id: str | None
    error: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    links: dict[str, str]


class JobList(BaseModel):
    items: list[JobOut]
    next_cursor: str | None
