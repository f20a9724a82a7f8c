"""Request and response bodies of the ``/models`` resources and the registry (aliases,
tags, description)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.schemas.common import StoredBody

MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# an alias starts with a letter, so name@3 is always a version and name@champion an alias
ALIAS_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
MAX_VERSION = 2**31 - 1  # versions are an INTEGER column
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:=/-]{0,63}$"
# free text: no control characters but tab and newline (a NUL cannot be stored in Postgres)
TEXT_PATTERN = r"^[^\x00-\x08\x0b-\x1f\x7f]*$"

ModelName = Annotated[str, Path(min_length=1, max_length=200, pattern=MODEL_NAME_PATTERN,
                                description="a model name", examples=["churn"])]
AliasName = Annotated[str, Path(pattern=ALIAS_PATTERN, description="an alias: a letter, then "
                                "letters, digits, _ or - (not \"latest\")",
                                examples=["champion"])]
Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]


class DatasetLineage(BaseModel):
    """The training dataset of a model version: what was in it, not only its id."""

    id: str
    name: str | None
    content_sha256: str | None = Field(
        description="SHA-256 of the dataset's parsed content (GET /models?dataset_sha256= "
        "finds every version trained on it); null for a dataset stored before content "
        "hashes until `sodm backfill-hashes` runs")
    n_rows: int | None
    n_features: int | None


class ModelOut(BaseModel):
    """A trained model version with its held-out metrics, margin statistics and registry
    labels (the aliases that point at it, its tags and description)."""

    id: str
    name: str
    version: int
    algorithm: str
    backend: str
    dataset_id: str
    dataset: DatasetLineage
    job_id: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    margin: dict[str, Any]
    fit_info: dict[str, Any] = Field(
        default_factory=dict, description="how the model was fitted: the resolved lam, gamma "
        "and theta (params), the \"auto\" search (chosen values, CV table, CPU seconds and "
        "budget) and the Platt calibration when there is one")
    train_seconds: float
    n_support_vectors: int
    n_features: int
    feature_names: list[str] | None = Field(
        description="the training data's column names (CSV or Parquet); /predict accepts "
        "instances as objects keyed by them")
    classes: list[Any]
    file_sha256: str
    description: str
    tags: list[str]
    aliases: list[str] = Field(description="aliases of this name that point at this version")
    created_at: datetime
    links: dict[str, str]


class ModelList(BaseModel):
    items: list[ModelOut]
    next_cursor: str | None


class ModelPatch(StoredBody):
    """``PATCH /models/{id}``: the fields given replace the stored ones."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"description": "RBF, lam 1e4; beats v2 on the Q3 data",
                      "tags": ["prod-candidate", "team=risk"]}]})

    description: str | None = Field(default=None, max_length=4000, pattern=TEXT_PATTERN,
                                    description="free text; tab and newline are the only "
                                    "control characters it may hold")
    tags: list[Tag] | None = Field(default=None, max_length=32,
                                   description="the whole set of tags (replaces the old one)")


class AliasPut(StoredBody):
    """``PUT /models/{name}/aliases/{alias}``: the version to point at (by number or id)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"version": 3}]})

    version: int | None = Field(default=None, ge=1, le=MAX_VERSION)
    model_id: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_-]{1,64}$")


class AliasOut(BaseModel):
    name: str
    alias: str
    model_id: str
    version: int | None
    updated_at: datetime
    links: dict[str, str]


class AliasList(BaseModel):
    items: list[AliasOut]


class MarginWindowOut(BaseModel):
    """The served margins of one window (or of all windows together) against the
    reference."""

    n: int = Field(description="margins served (one per row; one per class and row for "
                   "more than two classes)")
    mean: float | None
    variance: float | None
    inside: float | None = Field(description="share inside the band [1-theta, 1+theta]")
    psi: float | None = Field(description="population stability index against the "
                              "reference, over its deciles")
    ks: float | None = Field(description="Kolmogorov-Smirnov distance to the reference")
    drift: bool | None = Field(description="psi >= psi_threshold with at least min_margins "
                               "margins; null when there are fewer or no reference")


class MarginWindowAt(MarginWindowOut):
    start: datetime
    end: datetime


class MarginLive(MarginWindowOut):
    counts: list[int] = Field(description="histogram on the grid (first: below its first "
                              "edge, last: at or above its last)")


class MarginReference(BaseModel):
    n: int
    mean: float | None
    variance: float | None
    inside: float | None
    counts: list[int]
    source: str | None = Field(description="held-out (the rows the job held out) or "
                               "dataset-sample (computed later from the dataset)")


class MonitoringOut(BaseModel):
    """``GET /models/{id}/monitoring``."""

    model_config = ConfigDict(protected_namespaces=())

    model_id: str
    window_seconds: int
    windows_asked: int
    psi_threshold: float
    min_margins: int
    band: dict[str, float]
    grid: dict[str, Any]
    reference: MarginReference | None = Field(
        description="the served-margin distribution on data the model was not trained on; "
        "null when it cannot be computed (the dataset is gone)")
    live: MarginLive = Field(description="all the windows below together")
    windows: list[MarginWindowAt] = Field(description="newest first; windows without "
                                          "traffic are left out")
