"""Service configuration from environment variables (pydantic-settings).

Defaults are the embedded quick-start stack (a SQLite file and kombu's SQLAlchemy
transport under ``SODM_DATA_DIR``); the real stack sets ``DATABASE_URL`` to Postgres and
``CELERY_BROKER_URL`` to Redis.
"""

from __future__ import annotations

import ipaddress
import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """All knobs of the service; every field maps to an upper-case environment variable."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    data_dir: Path = Field(default=Path(".data"), alias="SODM_DATA_DIR")
    # where datasets and prediction results are stored (app.services.filestore.object_store): unset,
    # SODM_DATA_DIR on this host; s3://bucket/prefix for an S3-compatible bucket
    storage_url: str | None = Field(default=None, alias="SODM_STORAGE_URL")
    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    celery_broker_url: str | None = Field(default=None, alias="CELERY_BROKER_URL")

    # uploads and prediction limits
    max_upload_bytes: int = Field(default=1 << 30, alias="SODM_MAX_UPLOAD_BYTES")
    # cap on what a .gz/.xz upload may expand to (decompression-bomb guard)
    max_decompressed_bytes: int = Field(default=4 << 30, alias="SODM_MAX_DECOMPRESSED_BYTES")
    max_predict_rows: int = Field(default=10_000, alias="SODM_MAX_PREDICT_ROWS")
    max_predict_body_bytes: int = Field(default=64 << 20, alias="SODM_MAX_PREDICT_BODY_BYTES")

    # jobs
    job_max_attempts: int = Field(default=3, alias="SODM_JOB_MAX_ATTEMPTS")
    job_lease_seconds: int = Field(default=60, alias="SODM_JOB_LEASE_SECONDS")
    job_heartbeat_seconds: float = Field(default=5.0, alias="SODM_JOB_HEARTBEAT_SECONDS")
    job_time_limit_seconds: int = Field(default=6 * 3600, alias="SODM_JOB_TIME_LIMIT_SECONDS")
    # address space a job may add to its pool child (worker.lifecycle.memory); past it: FAILED
    # memory-limit and the child lives on. 0: no limit. Spark jobs are not limited.
    job_memory_limit_mb: int = Field(default=16384, ge=0, alias="SODM_JOB_MEMORY_LIMIT_MB")
    reaper_interval_seconds: float = Field(default=15.0, alias="SODM_REAPER_INTERVAL_SECONDS")
    requeue_after_seconds: float = Field(default=60.0, alias="SODM_REQUEUE_AFTER_SECONDS")
    # worker liveness: each worker's main process writes a heartbeat this often; a worker
    # unseen for three periods counts as dead (/readyz, /workers, the dashboard header)
    worker_heartbeat_seconds: float = Field(default=10.0, gt=0,
                                            alias="SODM_WORKER_HEARTBEAT_SECONDS")

    # celery: queue name (unique per test session) and broker visibility timeout
    # (None: twice the job time limit, so a long job is never redelivered while it runs)
    celery_queue: str = Field(default="sodm", alias="SODM_CELERY_QUEUE")
    visibility_timeout_seconds: int | None = Field(
        default=None, alias="SODM_VISIBILITY_TIMEOUT_SECONDS"
    )
    # connect and socket timeout of every broker call (a silent Redis never hangs a request)
    broker_timeout_seconds: float = Field(default=5.0, gt=0, alias="SODM_BROKER_TIMEOUT_SECONDS")
    model_cache_size: int = Field(default=16, alias="SODM_MODEL_CACHE_SIZE")
    # batch prediction jobs read this many bytes of dense float64 rows at a time
    predict_batch_bytes: int = Field(default=32 << 20, ge=1, alias="SODM_PREDICT_BATCH_BYTES")

    # server-side maximums of the POST /train parameters that cost memory or time
    # (app.services.job_queue.algorithm_specs names each parameter's limit;
    # above it: a 422 naming it)
    limit_cache_size: float = Field(default=4096.0, gt=0, alias="SODM_LIMIT_CACHE_SIZE")
    limit_n_jobs: int = Field(default=32, ge=1, alias="SODM_LIMIT_N_JOBS")
    limit_levels: int = Field(default=12, ge=0, alias="SODM_LIMIT_LEVELS")
    limit_p: int = Field(default=64, ge=2, alias="SODM_LIMIT_P")
    limit_n_strata: int = Field(default=4096, ge=1, alias="SODM_LIMIT_N_STRATA")
    limit_landmark_candidates: int = Field(default=1_000_000, ge=1,
                                           alias="SODM_LIMIT_LANDMARK_CANDIDATES")
    limit_epochs: int = Field(default=10_000, ge=1, alias="SODM_LIMIT_EPOCHS")
    limit_max_iter: int = Field(default=100_000, ge=1, alias="SODM_LIMIT_MAX_ITER")
    # the projection factors a float64 budget x budget kernel: memory grows as budget squared
    limit_max_support_vectors: int = Field(default=20_000, ge=1,
                                           alias="SODM_LIMIT_MAX_SUPPORT_VECTORS")
    limit_degree: int = Field(default=10, ge=1, alias="SODM_LIMIT_DEGREE")
    limit_n_partitions: int = Field(default=10_000, ge=1, alias="SODM_LIMIT_N_PARTITIONS")
    limit_n_clusters: int = Field(default=4096, ge=1, alias="SODM_LIMIT_N_CLUSTERS")
    limit_fanout: int = Field(default=64, ge=2, alias="SODM_LIMIT_FANOUT")
    limit_sample_size: int = Field(default=200_000, ge=1, alias="SODM_LIMIT_SAMPLE_SIZE")
    limit_inner_steps: int = Field(default=100_000_000, ge=1, alias="SODM_LIMIT_INNER_STEPS")
    limit_grid_points: int = Field(default=200, ge=1, alias="SODM_LIMIT_GRID_POINTS")
    limit_search_folds: int = Field(default=20, ge=2, alias="SODM_LIMIT_SEARCH_FOLDS")

    # ingest (docs/reliability.md, "Ingest"): each upload is parsed in a child process with
    # these CPU-time, wall-clock and memory limits (memory: on top of the loaded modules);
    # POST /datasets waits up to ingest_wait_seconds for the parse (201), then answers 202
    ingest_wait_seconds: float = Field(default=10.0, ge=0, le=300,
                                       alias="SODM_INGEST_WAIT_SECONDS")
    ingest_cpu_seconds: int = Field(default=600, ge=1, alias="SODM_INGEST_CPU_SECONDS")
    ingest_time_limit_seconds: int = Field(default=900, ge=1,
                                           alias="SODM_INGEST_TIME_LIMIT_SECONDS")
    ingest_memory_bytes: int = Field(default=8 << 30, ge=64 << 20,
                                     alias="SODM_INGEST_MEMORY_BYTES")
    # parses at once per API process (each up to ingest_memory_bytes); more uploads wait
    ingest_concurrency: int = Field(default=2, ge=1, le=64, alias="SODM_INGEST_CONCURRENCY")
    # parses of one tenant at once in the whole service (every API process, counted in
    # the database): a tenant never holds more while the others' uploads wait
    ingest_tenant_parses: int = Field(default=1, ge=1, le=64,
                                      alias="SODM_INGEST_TENANT_PARSES")
    # a parse's CPU budget scales with the bytes it parses (the upload, or what it expands
    # to): floor + per MB, at most ingest_cpu_seconds; its wall-clock budget is three times
    # that plus 30 s, at most ingest_time_limit_seconds
    ingest_cpu_floor_seconds: float = Field(default=30.0, ge=1,
                                            alias="SODM_INGEST_CPU_FLOOR_SECONDS")
    ingest_cpu_seconds_per_mb: float = Field(default=1.0, ge=0,
                                             alias="SODM_INGEST_CPU_SECONDS_PER_MB")
    # caps on what an upload may hold and on what later steps allocate from it (a 413
    # naming the cap and the value): rows, features, classes (one-vs-rest problems, the
    # confusion matrix), cells of the dense layout, and bytes of one line / one token
    limit_rows: int = Field(default=50_000_000, ge=1, alias="SODM_LIMIT_ROWS")
    limit_features: int = Field(default=20_000_000, ge=1, le=2**31 - 1,
                                alias="SODM_LIMIT_FEATURES")
    limit_classes: int = Field(default=1000, ge=2, alias="SODM_LIMIT_CLASSES")
    limit_dense_cells: int = Field(default=1 << 29, ge=1, alias="SODM_LIMIT_DENSE_CELLS")
    limit_line_bytes: int = Field(default=16 << 20, ge=64, alias="SODM_LIMIT_LINE_BYTES")
    limit_token_bytes: int = Field(default=4096, ge=32, alias="SODM_LIMIT_TOKEN_BYTES")

    # serving (docs/serving.md): API processes of sodm serve / sodm run (0: one per core,
    # app.core.cores), evaluation threads per API process (0: its cores divided by the API
    # processes), micro-batching of small /predict requests
    api_workers: int = Field(default=0, ge=0, alias="SODM_API_WORKERS")
    predict_threads: int = Field(default=0, ge=0, alias="SODM_PREDICT_THREADS")
    predict_batch_rows: int = Field(default=64, ge=1, alias="SODM_PREDICT_BATCH_ROWS")
    predict_batch_wait_ms: float = Field(default=2.0, ge=0, le=50,
                                         alias="SODM_PREDICT_BATCH_WAIT_MS")

    # webhooks (docs/reliability.md, "Webhooks"): endpoints resolving to private, loopback,
    # link-local or otherwise non-global addresses are refused unless allowed here; the
    # worker's sender polls the outbox every webhook_poll_seconds, sends up to
    # webhook_concurrency deliveries at once, each within webhook_timeout_seconds, and
    # retries a failed one after each delay of the schedule in turn (about a day in all)
    webhook_allow_private: bool = Field(default=False, alias="SODM_WEBHOOK_ALLOW_PRIVATE")
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=120,
                                           alias="SODM_WEBHOOK_TIMEOUT_SECONDS")
    webhook_poll_seconds: float = Field(default=1.0, gt=0, le=60,
                                        alias="SODM_WEBHOOK_POLL_SECONDS")
    webhook_concurrency: int = Field(default=4, ge=1, le=64, alias="SODM_WEBHOOK_CONCURRENCY")
    webhook_retry_seconds: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [5.0, 60.0, 300.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
                                 28800.0], alias="SODM_WEBHOOK_RETRY_SECONDS")
    webhooks_per_tenant: int = Field(default=20, ge=1, alias="SODM_WEBHOOKS_PER_TENANT")

    # margin monitoring (app.services.inference.monitoring): served margins are counted per model in
    # each API process and flushed to the database every monitor_flush_seconds into windows
    # of monitor_window_seconds, the last monitor_retention_windows of them kept; a window
    # of at least monitor_min_margins margins whose PSI against the training distribution
    # reaches monitor_psi_threshold counts as drifted
    monitor_window_seconds: int = Field(default=3600, ge=1, alias="SODM_MONITOR_WINDOW_SECONDS")
    monitor_flush_seconds: float = Field(default=10.0, gt=0, le=3600,
                                         alias="SODM_MONITOR_FLUSH_SECONDS")
    monitor_retention_windows: int = Field(default=168, ge=1,
                                           alias="SODM_MONITOR_RETENTION_WINDOWS")
    monitor_psi_threshold: float = Field(default=0.2, gt=0, alias="SODM_MONITOR_PSI_THRESHOLD")
    monitor_min_margins: int = Field(default=100, ge=1, alias="SODM_MONITOR_MIN_MARGINS")

    # spark backend (worker side); neither set = backend "spark" refused at POST /train
    spark_remote: str | None = Field(default=None, alias="SODM_SPARK_REMOTE")
    spark_master: str | None = Field(default=None, alias="SODM_SPARK_MASTER")

    # http
    # a JSON list or comma-separated origins; empty = CORS closed
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list,
                                                         alias="SODM_CORS_ORIGINS")
    # rate limits (app/api/ratelimit.py): cost units per minute per API key (0: off), requests
    # per minute per client address without a valid key; shared by all API processes
    # through Redis (SODM_REDIS_URL, default the broker when it is Redis)
    rate_limit_per_minute: int = Field(default=600, ge=0, alias="SODM_RATE_LIMIT_PER_MINUTE")
    rate_limit_anonymous_per_minute: int = Field(
        default=120, ge=0, alias="SODM_RATE_LIMIT_ANONYMOUS_PER_MINUTE")
    # the windows' length: both limits count per this many seconds ("per minute" at the default)
    rate_limit_window_seconds: int = Field(default=60, ge=1, le=3600,
                                           alias="SODM_RATE_LIMIT_WINDOW_SECONDS")
    # per-tenant quotas (app.services.tenancy.quotas; 0: no quota): stored bytes of datasets and
    # models (507 above it), queued + running jobs (429), open /jobs/{id}/events streams
    # across all API processes (429)
    quota_storage_mb: int = Field(default=102_400, ge=0, alias="SODM_QUOTA_STORAGE_MB")
    quota_active_jobs: int = Field(default=100, ge=0, alias="SODM_QUOTA_ACTIVE_JOBS")
    quota_event_streams: int = Field(default=20, ge=0, alias="SODM_QUOTA_EVENT_STREAMS")
    redis_url: str | None = Field(default=None, alias="SODM_REDIS_URL")
    # hot-path caches: a revoked key stops within auth_cache_seconds in every API process
    # (at once while the Redis invalidation channel is up), model rows likewise
    auth_cache_seconds: float = Field(default=5.0, ge=0, le=300, alias="SODM_AUTH_CACHE_SECONDS")
    model_row_cache_seconds: float = Field(default=5.0, ge=0, le=300,
                                           alias="SODM_MODEL_ROW_CACHE_SECONDS")
    # bearer token of GET /metrics (Prometheus' scrape config); unset: /metrics is off (404)
    metrics_token: str | None = Field(default=None, alias="SODM_METRICS_TOKEN")
    # idle keep-alive connections are closed after this long (uvicorn's default is 5 s):
    # above clients' and load balancers' idle timeouts, so the server never closes a
    # connection just as a client reuses it (the reused request then fails with a reset)
    keep_alive_seconds: int = Field(default=75, ge=1, alias="SODM_KEEP_ALIVE_SECONDS")
    # the HTTP edge (app/api/http_protocol.py), enforced on the bytes as they arrive, before
    # uvicorn's parser buffers them: request line (414), one header line and all header
    # lines (431), line ends included; deadlines for slow senders (408): a request head
    # within header_timeout_seconds of its first byte, a body within body_timeout_seconds
    # plus 1 s per body_min_bytes_per_second bytes received (0: the body within
    # body_timeout_seconds); open connections per client address and API process (429;
    # 0: no cap; trusted proxies are exempt)
    limit_request_line_bytes: int = Field(default=8192, ge=256,
                                          alias="SODM_LIMIT_REQUEST_LINE_BYTES")
    limit_header_bytes: int = Field(default=8192, ge=256, alias="SODM_LIMIT_HEADER_BYTES")
    limit_header_block_bytes: int = Field(default=32768, ge=1024,
                                          alias="SODM_LIMIT_HEADER_BLOCK_BYTES")
    header_timeout_seconds: float = Field(default=15.0, gt=0, le=3600,
                                          alias="SODM_HEADER_TIMEOUT_SECONDS")
    body_timeout_seconds: float = Field(default=30.0, gt=0, alias="SODM_BODY_TIMEOUT_SECONDS")
    body_min_bytes_per_second: int = Field(default=16384, ge=0,
                                           alias="SODM_BODY_MIN_BYTES_PER_SECOND")
    limit_connections_per_address: int = Field(default=32, ge=0,
                                               alias="SODM_LIMIT_CONNECTIONS_PER_ADDRESS")
    # reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed: addresses or
    # networks, comma-separated (``*``: any). Empty (the default): the client address is the
    # TCP peer and forwarded headers are ignored
    trusted_proxies: Annotated[list[str], NoDecode] = Field(default_factory=list,
                                                            alias="SODM_TRUSTED_PROXIES")
    host: str = Field(default="127.0.0.1", alias="SODM_HOST")
    port: int = Field(default=8000, alias="SODM_PORT")

    # logs: readable lines (text) or one JSON object per line (json), both with the request
    # and job ids bound to the record (app.core.logs)
    log_format: Literal["text", "json"] = Field(default="text", alias="SODM_LOG_FORMAT")
    log_level: str = Field(default="INFO", alias="SODM_LOG_LEVEL")
    # one log line per API request (`sodm serve --no-access-log` turns it off)
    access_log: bool = Field(default=True, alias="SODM_ACCESS_LOG")

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [o.strip() for o in text.split(",") if o.strip()]
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split_proxies(cls, value: Any) -> Any:
        entries = value.split(",") if isinstance(value, str) else value
        out = []
        for entry in (str(e).strip() for e in entries or ()):
            if not entry:
                continue
            if entry != "*":
                try:
                    entry = str(ipaddress.ip_network(entry, strict=False))
                except ValueError as exc:
                    raise ValueError(f"SODM_TRUSTED_PROXIES: {entry!r} is not an address, "
                                     "a network or *") from exc
            out.append(entry)
        return out
    @field_validator("webhook_retry_seconds", mode="before")
    @classmethod
    def _split_delays(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [float(v) for v in value.replace(",", " ").split()]
        if isinstance(value, list) and any(float(v) < 0 for v in value):
            raise ValueError("retry delays must not be negative")
        return value

    @property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL; the embedded default is a SQLite file in the data directory."""
        if self.database_url:
            url = self.database_url
            if url.startswith("postgresql://"):
                url = "postgresql+psycopg://" + url[len("postgresql://") :]
            return url
        return f"sqlite:///{(self.data_dir / 'sodm.db').resolve()}"

    @property
    def resolved_redis_url(self) -> str | None:
        """Redis for the shared rate limiter and cache invalidation, or None (embedded)."""
        if self.redis_url:
            return self.redis_url
        url = self.resolved_broker_url
        return url if url.startswith(("redis://", "rediss://", "unix://")) else None

    @property
    def resolved_broker_url(self) -> str:
        """The Celery broker; the embedded default is kombu's SQLAlchemy transport (a file)."""
        if self.celery_broker_url:
            return self.celery_broker_url
        return f"sqla+sqlite:///{(self.data_dir / 'broker.db').resolve()}"


@lru_cache
def get_settings() -> Settings:
    """Process-wide settings (tests clear the cache after changing the environment)."""
    return Settings()
