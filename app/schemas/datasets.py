"""Response bodies of the ``/datasets`` resources."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class DatasetOut(BaseModel):
    id: str
    name: str
    format: str = Field(description="the uploaded format: csv | libsvm | parquet")
    n_rows: int
    n_features: int
    classes: dict[str, int] = Field(description="original label -> row count")
    layout: str = Field(description="stored layout: dense | sparse")
    size_bytes: int = Field(description="bytes uploaded (before decompression)")
    stored_bytes: int = Field(
        default=0, description="bytes it holds on disk, what the storage quota counts: while "
                               "parsing, the upload and its decompressed copy; once ready, "
                               "the stored files")
    sha256: str = Field(description="SHA-256 of the uploaded bytes")
    content_sha256: str | None = Field(
        default=None, description="SHA-256 of the parsed content (rows, labels, values in "
        "the canonical form sodm-content-v1): the same data in CSV, LIBSVM or Parquet hashes "
        "alike; null while parsing")
    duplicate_of: str | None = Field(
        default=None, description="the id of this tenant's earlier dataset with the same "
        "content, if there is one")
    state: Literal["parsing", "ready", "failed"] = Field(
        description="parsing (rows, features and classes not known yet), ready (usable), "
                    "failed (refused: see problem)")
    problem: dict[str, Any] | None = Field(
        default=None, description="the RFC 9457 problem of a failed parse")
    created_at: datetime


class DatasetList(BaseModel):
    items: list[DatasetOut]
    next_cursor: str | None = None
