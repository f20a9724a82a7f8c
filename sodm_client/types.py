"""Typed shapes of the sodm API's JSON bodies, generated from its OpenAPI document by
``scripts/client_types.py`` (do not edit; rerun it when a response schema changes).

Each TypedDict is one component schema; keys the schema does not require are
``NotRequired``. Values of open objects (``params``, ``metrics``, ...) are ``Any``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class AlgorithmList(TypedDict):
    items: list[AlgorithmOut]


class AlgorithmOut(TypedDict):
    name: str
    title: str
    description: str
    backends: list[str]
    params: list[ParamOut]


class AliasList(TypedDict):
    items: list[AliasOut]


class AliasOut(TypedDict):
    name: str
    alias: str
    model_id: str
    version: int | None
    updated_at: str
    links: dict[str, str]


class DatasetLineage(TypedDict):
    """The training dataset of a model version: what was in it, not only its id."""
    id: str
    name: str | None
    content_sha256: str | None
    n_rows: int | None
    n_features: int | None


class DatasetList(TypedDict):
    items: list[DatasetOut]
    next_cursor: NotRequired[str | None]


class DatasetOut(TypedDict):
    id: str
    name: str
    format: str
    n_rows: int
    n_features: int
    classes: dict[str, int]
    layout: str
    size_bytes: int
    stored_bytes: NotRequired[int]
    sha256: str
    content_sha256: NotRequired[str | None]
    duplicate_of: NotRequired[str | None]
    state: Literal['parsing', 'ready', 'failed']
    problem: NotRequired[dict[str, Any] | None]
    created_at: str


class JobList(TypedDict):
    items: list[JobOut]
    next_cursor: str | None


class JobOut(TypedDict):
    """A training job as the API shows it."""
    kind: NotRequired[Literal['train']]
    id: str
    state: JobState
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
    created_at: str
    started_at: str | None
    finished_at: str | None
    updated_at: str
    request_id: NotRequired[str | None]
    waiting: NotRequired[str | None]
    links: dict[str, str]


JobState = Literal['QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLING', 'CANCELLED']


class ModelList(TypedDict):
    items: list[ModelOut]
    next_cursor: str | None


class ModelOut(TypedDict):
    """A trained model version with its held-out metrics, margin statistics and registry
    labels (the aliases that point at it, its tags and description).
    """
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
    fit_info: NotRequired[dict[str, Any]]
    train_seconds: float
    n_support_vectors: int
    n_features: int
    feature_names: list[str] | None
    classes: list[Any]
    file_sha256: str
    description: str
    tags: list[str]
    aliases: list[str]
    created_at: str
    links: dict[str, str]


class ParamLimit(TypedDict):
    value: float
    setting: str


class ParamOut(TypedDict):
    """One parameter of an algorithm: its type, default, bounds and meaning."""
    name: str
    type: Literal['number', 'integer', 'boolean', 'choice']
    default: Any
    description: str
    minimum: float | None
    exclusive_minimum: float | None
    maximum: float | None
    exclusive_maximum: float | None
    choices: list[str]
    words: list[str]
    nullable: bool
    limit: ParamLimit | None
    kernels: list[str]
    advanced: bool
    schema: dict[str, Any]


class PredictResponse(TypedDict):
    model_id: str
    model_name: str
    version: int
    classes: list[Any]
    labels: list[Any]
    decision_values: list[Any]
    probabilities: NotRequired[list[list[float]] | None]


class PredictionJobList(TypedDict):
    items: list[PredictionJobOut]
    next_cursor: str | None


class PredictionJobOut(TypedDict):
    """A batch prediction job: its model (resolved at creation), dataset, state, progress
    and, once SUCCEEDED, the result's size and download links (Parquet or CSV).
    """
    kind: NotRequired[Literal['predict']]
    id: str
    state: JobState
    model_id: str
    model_name: str | None
    version: int | None
    dataset_id: str
    progress: Progress
    rows_total: int | None
    rows_done: int | None
    result: PredictionResult | None
    error: dict[str, Any] | None
    attempt: int
    created_at: str
    started_at: str | None
    finished_at: str | None
    links: dict[str, str]


class PredictionResult(TypedDict):
    rows: int
    seconds: float
    bytes: int
    rows_out_of_range: NotRequired[int]
    out_of_range_row_ids: NotRequired[list[int]]


class Problem(TypedDict):
    """``application/problem+json`` (RFC 9457); extension members such as ``line``,
    ``field``/``column``, ``value`` or ``errors`` appear next to the standard ones.
    """
    type: str
    title: str
    status: int
    detail: NotRequired[str | None]
    instance: NotRequired[str | None]


class Progress(TypedDict):
    fraction: float
    message: str
    spark: NotRequired[SparkProgress | None]


class SparkProgress(TypedDict):
    """Where a Spark job's work runs and how far its current Spark stage is (the worker
    samples it while the job trains; the last sample stays after the job ends).
    """
    mode: Literal['classic', 'connect']
    application_id: NotRequired[str | None]
    session_id: NotRequired[str | None]
    stage_id: NotRequired[int | None]
    tasks_done: NotRequired[int]
    tasks_total: NotRequired[int]
    stages_done: NotRequired[int]


__all__ = [
    'AlgorithmList',
    'AlgorithmOut',
    'AliasList',
    'AliasOut',
    'DatasetLineage',
    'DatasetList',
    'DatasetOut',
    'JobList',
    'JobOut',
    'JobState',
    'ModelList',
    'ModelOut',
    'ParamLimit',
    'ParamOut',
    'PredictResponse',
    'PredictionJobList',
    'PredictionJobOut',
    'PredictionResult',
    'Problem',
    'Progress',
    'SparkProgress',
]
