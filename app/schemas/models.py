"""Response bodies of the ``/models`` resources."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel


class ModelOut(BaseModel):
    """A trained model version with its held-out metrics and margin statistics."""

    id: str
    name: str
    version: int
    algorithm: str
    backend: str
    dataset_id: str
    job_id: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    margin: dict[str, Any]
    train_seconds: float
    n_support_vectors: int
    n_features: int
    classes: list[Any]
    file_sha256: str
    created_at: datetime
    links: dict[str, str]


class ModelList(BaseModel):
    items: list[ModelOut]
    next_cursor: str | None
