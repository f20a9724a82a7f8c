"""Request and response bodies of ``POST /predict``.

``instances`` is parsed by ``app.services.inference.predictor`` (not by pydantic coercion) so that
strings, booleans, NaN and infinities are rejected with a problem naming the row and column.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import ID_PATTERN


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model_id: str | None = Field(default=None, max_length=64, pattern=ID_PATTERN)
    model: str | None = Field(default=None, max_length=270, pattern=r"^[^\x00-\x1f\x7f]+$",
                              description='"name" or "name@latest" (the newest version), '
                              '"name@3" (version 3) or "name@champion" (the version an alias '
                              'points at)', examples=["churn@champion"])
    instances: list[Any] = Field(
        description="dense rows [[x0, x1, ...]], sparse rows [{\"index\": value}] (0-based "
        "string keys), or for a model with feature_names rows keyed by those names "
        "[{\"age\": 63, \"chol\": 233, ...}] (every name once)",
        examples=[[[0.1, 0.2, 0.3, 0.4]], [{"age": 63.0, "chol": 233.0}]])


class PredictResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=(), json_schema_extra={"examples": [
        {"model_id": "9b1d2c3e-4f5a-4b6c-8d7e-0f1a2b3c4d5e", "model_name": "churn",
         "version": 3, "classes": [0, 1], "labels": [1, 0],
         "decision_values": [0.84, -1.12], "probabilities": [[0.18, 0.82], [0.91, 0.09]]}]})

    model_id: str
    model_name: str
    version: int
    classes: list[Any] = Field(description="the model's labels; with more than two, "
                               "decision_values[i][k] is the score of classes[k]")
    labels: list[Any]
    decision_values: list[Any]
    probabilities: list[list[float]] | None = Field(
        default=None, description="per row, the probability of each class in the model's "
        "class order (Platt scaling); null when the model was trained without "
        "probability=true")
