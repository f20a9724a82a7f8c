"""ORM tables: tenants, API keys, datasets, jobs, models. Postgres is the truth about jobs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

JSONType = JSON().with_variant(JSONB(), "postgresql")


class JobState(StrEnum):
    """A job's state (a ``str``: compares equal to the stored value). QUEUED -> RUNNING ->
    SUCCEEDED | FAILED, and a cancel: QUEUED -> CANCELLED, RUNNING -> CANCELLING ->
    CANCELLED."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


JOB_STATES = tuple(JobState)
TERMINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
# states in which a job holds its datasets (a dataset cannot be deleted under it)
ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.CANCELLING)


class DatasetState(StrEnum):
    """A dataset's state: PARSING (the upload is being parsed in a child process) -> READY
    (stored, usable) | FAILED (refused; ``problem`` holds the RFC 9457 problem)."""

    PARSING = "parsing"
    READY = "ready"
    FAILED = "failed"


class WebhookEvent(StrEnum):
    """What a webhook endpoint can subscribe to: a job ending (training or batch
    prediction), and an alias of a model name set, moved or deleted."""

    JOB_SUCCEEDED = "job.succeeded"
    JOB_FAILED = "job.failed"
    JOB_CANCELLED = "job.cancelled"
    MODEL_ALIAS_MOVED = "model.alias_moved"


class DeliveryStatus(StrEnum):
    """A webhook delivery: PENDING (due now or at ``next_attempt_at``) -> DELIVERED (a 2xx)
    | FAILED (the retry schedule ran out, or the endpoint was refused)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class JobKind(StrEnum):
    TRAIN = "train"
    PREDICT = "predict"


def new_id() -> str:
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ApiKey(Base):
    """An API key; only its SHA-256 hash is stored. ``prefix`` identifies it in listings."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Dataset(Base):
    __tablename__ = "datasets"
    __table_args__ = (
        Index("ix_datasets_tenant_content", "tenant_id", "content_sha256"),
    )
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    format: Mapped[str] = mapped_column(String(16))  # the uploaded format: csv | libsvm | parquet
    n_rows: Mapped[int] = mapped_column(Integer)
    n_features: Mapped[int] = mapped_column(Integer)
    classes: Mapped[dict[str, int]] = mapped_column(JSONType)  # original label -> count
    sparse: Mapped[bool] = mapped_column(Boolean, default=False)
    storage_path: Mapped[str] = mapped_column(Text)  # relative to SODM_DATA_DIR, derived from id
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    sha256: Mapped[str] = mapped_column(String(64), default="")  # of the uploaded bytes
    # of the parsed content (rows, labels, values: app.services.data.content_hash); None until
    # parsed, and for datasets stored before it existed until `sodm backfill-hashes`
    content_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default=DatasetState.READY,
                                       server_default=DatasetState.READY.value, index=True)
    # the problem+json body of a FAILED parse (None otherwise)
    problem: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # bytes this dataset holds on disk (while parsing: the upload and its decompressed copy
    # as they are written; once ready: the stored files): what the storage quota counts
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # while parsing: the process that owns the parse (app.services.data.process_owner token: the
    # API process while the upload waits for a slot, then the parsing child), its last
    # heartbeat and when the parse took a slot (the tenant's parses count those)
    ingest_owner: Mapped[str | None] = mapped_column(String(128), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    parse_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                              nullable=True)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "idempotency_key", name="uq_jobs_tenant_idem"),
        Index("ix_jobs_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_jobs_state_lease", "state", "lease_until"),
    )
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    # "train" (dataset -> a model version) or "predict" (model_id's model over dataset_id ->
    # a predictions file); both share the engine: claim, lease, progress, cancel
    kind: Mapped[str] = mapped_column(String(16), default=JobKind.TRAIN,
                                      server_default=JobKind.TRAIN.value)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    test_dataset_id: Mapped[str | None] = mapped_column(ForeignKey("datasets.id"), nullable=True)
    algorithm: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str] = mapped_column(String(16), default="local")
    params: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    request: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)  # the full body
    model_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED)
    progress_fraction: Mapped[float] = mapped_column(Float, default=0.0)
    progress_message: Mapped[str] = mapped_column(Text, default="")
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    spark_session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # a running Spark job's application / session and current stage (schemas.SparkProgress)
    spark_progress: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # X-Request-ID of the POST /train that created the job: the worker logs it (app.core.logs)
    request_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    model_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    # when the worker's webhook sender turned this job's terminal state into deliveries
    # (app.services.notifications.webhook_endpoints.announce_jobs); NULL until then
    announced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                          nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class Model(Base):
    """A trained model version. ``job_id`` is unique: a job produces at most one model."""

    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name", "version", name="uq_models_name_version"),
        Index("ix_models_tenant_created", "tenant_id", "created_at", "id"),
    )
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), unique=True)
    dataset_id: Mapped[str] = mapped_column(String(36), index=True)
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer)
    algorithm: Mapped[str] = mapped_column(String(32))
    backend: Mapped[str] = mapped_column(String(16), default="local")
    params: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    margin: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # the served-margin distribution y_hat * f(x) on the held-out rows, what live traffic
    # is compared with (app.services.inference.monitoring.Summary as JSON); None for models trained
    # before it existed until GET /models/{id}/monitoring computes it once from the dataset
    margin_reference: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    # how the model was fitted (the estimator's fit_info_ without its history): resolved
    # lam/gamma/theta, the "auto" search (CV table, CPU seconds, budget), calibration
    fit_info: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    n_features: Mapped[int] = mapped_column(Integer)
    # the training data's column names (CSV header, Parquet schema); None for LIBSVM
    feature_names: Mapped[list[str] | None] = mapped_column(JSONType, nullable=True)
    classes: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    n_support_vectors: Mapped[int] = mapped_column(Integer, default=0)
    train_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # the sha256 and size of the model's portable file (its bytes: ``ModelBlob``; the
    # tenant's storage quota counts the size)
    file_sha256: Mapped[str] = mapped_column(String(64), default="")
    file_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ModelBlob(Base):
    """A model's portable file (``solver.io.model_io`` bytes), inserted in the transaction that
    inserts its model (``app.services.model_registry.model_store``); deleted with it."""

    __tablename__ = "model_blobs"
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"),
                                          primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class ModelTag(Base):
    """A label on a model version (``GET /models?tag=...`` filters by it)."""

    __tablename__ = "model_tags"
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"),
                                          primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class ModelAlias(Base):
    """A movable name for one version of a model name (``name@champion``): only
    ``PUT``/``DELETE /models/{name}/aliases/{alias}`` change it, a new version never does."""

    __tablename__ = "model_aliases"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"),
                                           primary_key=True)
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"),
                                          index=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow,
                                                 onupdate=utcnow)


class Worker(Base):
    """A worker process's heartbeat (``worker.lifecycle.liveness``): live
    while ``last_seen`` is recent.

    ``id`` is ``host:pid`` of the worker's main process; its row is deleted at a clean
    shutdown and goes stale when the process dies.
    """

    __tablename__ = "workers"
    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    queue: Mapped[str] = mapped_column(String(200))
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow,
                                                index=True)


class Webhook(Base):
    """A tenant's webhook endpoint: the URL, the events it wants and the secret its
    deliveries are signed with (Standard Webhooks,
    ``app.services.notifications.webhook_endpoints``)."""

    __tablename__ = "webhooks"
    __table_args__ = (Index("ix_webhooks_tenant_created", "tenant_id", "created_at", "id"),)
    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(JSONType, default=list)
    secret: Mapped[str] = mapped_column(String(128))  # "whsec_" + base64 of the key
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class WebhookDelivery(Base):
    """One event for one endpoint: the outbox row the worker's sender delivers and retries
    (``worker.webhooks``); its id is the ``webhook-id`` header (receivers dedupe by it)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_hook_created", "webhook_id", "created_at", "id"),
    )
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(String(16), default=DeliveryStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                             nullable=True)
    # the endpoint's last HTTP status (None: no answer) and what went wrong, in words
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                          nullable=True)


class MarginWindow(Base):
    """The margins ``y_hat * f(x)`` one API process served for one model in one window:
    count, sum, sum of squares, how many fell inside the theta band and a histogram on the
    fixed grid of ``app.services.inference.monitoring`` (``SODM_MONITOR_WINDOW_SECONDS``). Each
    process overwrites its own row as it flushes; a read adds the processes up. Rows older than
    ``SODM_MONITOR_RETENTION_WINDOWS`` windows are deleted."""

    __tablename__ = "margin_windows"
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"),
                                          primary_key=True)
    window_start: Mapped[datetime] = mapped_column(DateTime(timezone=True), primary_key=True,
                                                   index=True)
    source: Mapped[str] = mapped_column(String(255), primary_key=True)  # host:pid
    n: Mapped[int] = mapped_column(BigInteger, default=0)
    total: Mapped[float] = mapped_column(Float, default=0.0)
    total_sq: Mapped[float] = mapped_column(Float, default=0.0)
    inside: Mapped[int] = mapped_column(BigInteger, default=0)
    counts: Mapped[list[int]] = mapped_column(JSONType, default=list)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
