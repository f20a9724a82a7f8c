"""The ``sodm`` command line: serve, worker, migrate, API-key management, and ``run`` (the
embedded quick start behind ``make run``).

Keys are printed once, at creation; only their hashes are stored.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.core.config import get_settings

# arbitrary constant identifying "sodm schema migration" in pg_advisory_xact_lock
MIGRATION_LOCK_KEY = 0x50D3_A11E


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def migrate(database_url: str | None = None) -> None:
    """``alembic upgrade head``; on Postgres under a transaction-scoped advisory lock so
    concurrent migrators (several replicas starting) run one after the other."""
    from alembic import command
    from sqlalchemy import create_engine, pool, text

    from migrations import alembic_config

    settings = get_settings()
    url = database_url or settings.resolved_database_url
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    cfg = alembic_config(url)
    if not url.startswith("postgresql"):
        command.upgrade(cfg, "head")
        return
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            conn.commit()
    finally:
        engine.dispose()


def create_key(tenant: str, name: str = "") -> str:
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import create_key as _create

    with session_scope() as session:
        _, key = _create(session, tenant, name)
    return key


def _cmd_serve(args: argparse.Namespace) -> int:
    """uvicorn with ``--workers`` API processes on one socket. Each process has its own model
    cache and evaluation slots (the cores divided by the processes); rate limits and cache
    invalidation go through Redis, and ``/metrics`` adds up every process's samples (a
    fresh ``PROMETHEUS_MULTIPROC_DIR``, removed at exit)."""
    import shutil
    import tempfile

    import uvicorn

    if args.no_access_log:  # the API processes' own per-request line (app.core.logs) too
        os.environ["SODM_ACCESS_LOG"] = "0"
        get_settings.cache_clear()
    s = get_settings()
    workers = api_workers(args.workers)
    os.environ["SODM_API_WORKERS"] = str(workers)
    made = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        made = tempfile.mkdtemp(prefix="sodm-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = made
    try:
        uvicorn.run("app.main:app", host=args.host or s.host, port=args.port or s.port,
                    workers=workers,
                    access_log=False,  # app.core.logs writes one sodm.access line per request
                    **uvicorn_options())
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    return 0


HTTP_PROTOCOL = "app.api.http_protocol:LimitedHttpToolsProtocol"


def uvicorn_options() -> dict[str, Any]:
    """The uvicorn settings of every API process (``sodm serve``, ``sodm run``, the test
    stack): our HTTP protocol (limits before parsing, deadlines, connections per address:
    ``app.api.http_protocol``), the keep-alive, and no forwarded headers: uvicorn's own default
    believes ``X-Forwarded-For`` from 127.0.0.1; the application believes it only from
    ``SODM_TRUSTED_PROXIES`` (``app.main``), read in the API process itself."""
    return {"http": HTTP_PROTOCOL, "timeout_keep_alive": get_settings().keep_alive_seconds,
            "proxy_headers": False}


def api_workers(asked: int | None = None) -> int:
    """The API processes to start: ``--workers``, else ``SODM_API_WORKERS``, else one per
    core (``app.core.cores.default_api_workers``)."""
    from app.core.cores import default_api_workers

    return max(1, int(asked or get_settings().api_workers or default_api_workers()))


def api_command(host: str, port: int, workers: int = 1) -> list[str]:
    """The uvicorn command line of the API (``sodm run`` and the test stack), with
    ``uvicorn_options``: ``workers`` processes on one port (their environment needs
    ``SODM_API_WORKERS`` to match). The per-request line is app.core.logs' ``sodm.access``, not
    uvicorn's."""
    o = uvicorn_options()
    cmd = [sys.executable, "-m", "uvicorn", "app.main:app", "--host", host, "--port",
           str(port), "--http", o["http"], "--timeout-keep-alive",
           str(o["timeout_keep_alive"]), "--no-proxy-headers", "--no-access-log"]
    return cmd + (["--workers", str(workers)] if workers > 1 else [])


def worker_command(queue: str | None = None) -> list[str]:
    q = queue or get_settings().celery_queue
    return [sys.executable, "-m", "celery", "-A", "worker.celery_app:celery_app", "worker",
            "--loglevel=INFO", "--concurrency=1", "-Q", q]


def _cmd_worker(args: argparse.Namespace) -> int:
    cmd = worker_command(args.queue)
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover - exec does not return


def _cmd_worker_ping(args: argparse.Namespace) -> int:
    """Healthcheck of a worker: a Celery control ping to this host's node answers in time."""
    import socket

    from app.services.job_queue import task_client

    node = (args.name or "celery@%h").replace("%h", socket.gethostname())
    if task_client.ping(node, args.timeout):
        print(f"{node}: pong")
        return 0
    _err(f"{node}: no reply within {args.timeout}s")
    return 1


def _spark_home(command: str) -> tuple[Path, dict[str, str]]:
    """The pyspark wheel's directory (``bin/``, ``jars/``) and the environment of a Spark
    process started from it: its Python workers run ``$PYSPARK_PYTHON``, the operator's, else
    this interpreter (which has ``solver``)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")  # located, not imported: app/ stays pyspark-free
    if spec is None or spec.origin is None:
        raise SystemExit(f"sodm {command} needs the spark extra: pip install 'sodm[spark]'")
    home = Path(spec.origin).resolve().parent
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    env = dict(os.environ, SPARK_HOME=str(home), PYSPARK_PYTHON=python,
               PYSPARK_DRIVER_PYTHON=os.environ.get("PYSPARK_DRIVER_PYTHON") or python)
    return home, env


def spark_master_command(host: str, port: int, webui_port: int
                         ) -> tuple[list[str], dict[str, str]]:
    """A standalone Spark master from the pyspark wheel in the foreground."""
    home, env = _spark_home("spark-master")
    return [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
            "--host", host, "--port", str(port), "--webui-port", str(webui_port)], env


def spark_worker_command(master: str, cores: int | None, memory: str | None,
                         webui_port: int, host: str | None = None
                         ) -> tuple[list[str], dict[str, str]]:
    """A standalone Spark worker from the pyspark wheel in the foreground; its executors'
    Python workers run this interpreter (the image's, with ``solver``)."""
    home, env = _spark_home("spark-worker")
    cmd = [str(home / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", master,
           "--webui-port", str(webui_port)]
    if host:
        cmd += ["--host", host]
    if cores:
        cmd += ["--cores", str(cores)]
    if memory:
        cmd += ["--memory", memory]
    return cmd, env


def spark_connect_command(host: str, port: int, master: str, conf: Sequence[str] = ()
                          ) -> tuple[list[str], dict[str, str]]:
    """The pyspark wheel's Spark Connect server in the foreground (``spark-submit`` execs the
    JVM, so signals reach it), with this Python (and so ``solver``) for its Python workers."""
    home, env = _spark_home("spark-connect")
    cmd = [str(home / "bin" / "spark-submit"),
           "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
           "--name", "Spark Connect server", "--master", master,
           "--conf", f"spark.connect.grpc.binding.address={host}",
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.ui.enabled=false"]
    for kv in conf:  # later --conf values win
        cmd += ["--conf", kv]
    return cmd, env


def _cmd_spark_connect(args: argparse.Namespace) -> int:
    cmd, env = spark_connect_command(args.host, args.port, args.master, args.conf)
    os.execve(cmd[0], cmd, env)
    return 0  # pragma: no cover - exec does not return


def _cmd_spark_master(args: argparse.Namespace) -> int:
    cmd, env = spark_master_command(args.host, args.port, args.webui_port)
    os.execve(cmd[0], cmd, env)
    return 0  # pragma: no cover - exec does not return


def _cmd_spark_worker(args: argparse.Namespace) -> int:
    cmd, env = spark_worker_command(args.master, args.cores, args.memory, args.webui_port,
                                    args.host)
    os.execve(cmd[0], cmd, env)
    return 0  # pragma: no cover - exec does not return


def _cmd_spark_connect_ping(args: argparse.Namespace) -> int:
    """Healthcheck of a Spark process (Connect server, master, worker): its port accepts
    connections."""
    import socket

    try:
        with socket.create_connection((args.host, args.port), timeout=args.timeout):
            pass
    except OSError as exc:
        _err(f"spark {args.host}:{args.port} unreachable: {exc.strerror or exc}")
        return 1
    print(f"spark {args.host}:{args.port}: listening")
    return 0


def ensure_store() -> None:
    """The store of datasets and results exists (a bucket is created when its URL allows)."""
    from app.services.filestore import object_store

    try:
        object_store.ensure(object_store.get_store())
    except (ValueError, OSError) as exc:  # a malformed URL, an unreachable server
        raise DataDirError(f"cannot use the store SODM_STORAGE_URL: {exc}") from exc
    except object_store.StoreError as exc:
        raise DataDirError(str(exc)) from exc


def _cmd_migrate(_: argparse.Namespace) -> int:
    migrate()
    _err("database migrated to head")
    ensure_store()
    return 0


def _cmd_backfill_hashes(_: argparse.Namespace) -> int:
    """Content hashes of the datasets stored before they existed (lineage)."""
    from app.services.data.dataset_catalog import backfill_content_hashes

    done, missing = backfill_content_hashes()
    print(f"hashed {done} dataset(s)")
    for dataset_id in missing:
        _err(f"dataset {dataset_id}: stored files missing, not hashed")
    return 1 if missing else 0


def _cmd_create_key(args: argparse.Namespace) -> int:
    key = create_key(args.tenant, args.name)
    _err(f"created a key for tenant {args.tenant!r}; it is shown only this once:")
    print(key, flush=True)
    return 0


def _cmd_revoke_key(args: argparse.Namespace) -> int:
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import revoke_key

    try:
        with session_scope() as session:
            n = revoke_key(session, args.prefix)
    except ValueError as exc:
        _err(str(exc))
        return 2
    if n == 0:
        _err("no live key matches that prefix")
        return 1
    print(f"revoked {n} key(s)")
    return 0


def _cmd_list_keys(args: argparse.Namespace) -> int:
    from app.core.db import session_scope
    from app.services.tenancy.apikeys import list_keys

    with session_scope() as session:
        keys = list_keys(session, args.tenant)
    print(f"{'PREFIX':<14}{'TENANT':<24}{'CREATED':<28}STATUS")
    for k in keys:
        status = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active"
        print(f"{k.prefix:<14}{k.tenant:<24}{k.created_at:%Y-%m-%d %H:%M:%S}{'':<9}{status}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    """Quick start: data dir, migrated database, a fresh key, then the API and one worker
    under ``app.supervise`` (a dead one is restarted), sharing a Prometheus directory so
    the API's /metrics includes the worker's samples."""
    import shutil

    from app.core.logs import configure
    from app.supervise import Child, Supervisor

    s = get_settings()
    try:
        s.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"cannot create the data directory {s.data_dir} "
                           f"(SODM_DATA_DIR): {exc.strerror}") from exc
    migrate()
    ensure_store()
    configure(s.log_format, s.log_level)  # after alembic, which sets up logging its own way
    key = create_key("default", "quick start")
    key_file = s.data_dir / "api-key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    metrics_dir = s.data_dir / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir()
    workers = api_workers(args.workers)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir.resolve()),
           "SODM_API_WORKERS": str(workers)}
    if args.no_access_log:
        env["SODM_ACCESS_LOG"] = "0"
    host, port = args.host or s.host, args.port or s.port
    shown = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    sup = Supervisor([Child("API", api_command(host, port, workers), env),
                      Child("worker", worker_command(), env)])
    signal.signal(signal.SIGINT, sup.forward)
    signal.signal(signal.SIGTERM, sup.forward)
    print(f"Dashboard/API: {shown} ({workers} API process{'es' if workers > 1 else ''})",
          flush=True)
    print(f"API key: {key}", flush=True)
    print(f"""
  dashboard  {shown}/dashboard  (sign in with the key)
  API docs   {shown}/docs
  key file   {key_file}
Next: upload the example dataset and train on it (README, "Use it"):
  KEY=$(cat {key_file})
  curl -s -H "Authorization: Bearer $KEY" -F file=@examples/heart_scale -F format=libsvm \\
       {shown}/datasets
Ctrl-C stops the API and the worker.""", flush=True)
    return sup.run()


def _serving_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--workers", type=int, default=None,
                    help="API processes sharing the port (default: SODM_API_WORKERS, else "
                         "one per core, at most 8); rate limits, caches and metrics stay "
                         "correct across them with Redis")
    sp.add_argument("--no-access-log", action="store_true",
                    help="no sodm.access log line per request (SODM_ACCESS_LOG=0)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sodm", description="SODM training service")
    sub = p.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("serve", help="run the API (uvicorn)")
    sp.add_argument("--host")
    sp.add_argument("--port", type=int)
    _serving_options(sp)
    sp.set_defaults(func=_cmd_serve)
    sp = sub.add_parser("worker", help="run one Celery worker (concurrency 1)")
    sp.add_argument("--queue", help="queue name (default SODM_CELERY_QUEUE)")
    sp.set_defaults(func=_cmd_worker)
    sp = sub.add_parser("worker-ping", help="healthcheck: ping this host's worker node")
    sp.add_argument("--name", help="node name (default celery@%%h)")
    sp.add_argument("--timeout", type=float, default=5.0)
    sp.set_defaults(func=_cmd_worker_ping)
    sp = sub.add_parser("spark-connect", help="run a Spark Connect server (foreground)")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=15002)
    sp.add_argument("--master", default="local[*]")
    sp.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark configuration (repeatable)")
    sp.set_defaults(func=_cmd_spark_connect)
    sp = sub.add_parser("spark-master", help="run a standalone Spark master (foreground)")
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=7077)
    sp.add_argument("--webui-port", type=int, default=8080)
    sp.set_defaults(func=_cmd_spark_master)
    sp = sub.add_parser("spark-worker", help="run a standalone Spark worker (foreground)")
    sp.add_argument("master", help="the master's URL, spark://host:7077")
    sp.add_argument("--host", help="the address this worker binds and advertises")
    sp.add_argument("--cores", type=int, help="cores for executors (default: all)")
    sp.add_argument("--memory", help="memory for executors, e.g. 2g (default: RAM - 1g)")
    sp.add_argument("--webui-port", type=int, default=8081)
    sp.set_defaults(func=_cmd_spark_worker)
    for name, port, what in (("spark-connect-ping", 15002, "the Spark Connect port"),
                             ("spark-ping", 7077, "a Spark master's or worker's port")):
        sp = sub.add_parser(name, help=f"healthcheck: {what} answers")
        sp.add_argument("--host", default="127.0.0.1")
        sp.add_argument("--port", type=int, default=port)
        sp.add_argument("--timeout", type=float, default=3.0)
        sp.set_defaults(func=_cmd_spark_connect_ping)
    sp = sub.add_parser("migrate", help="alembic upgrade head (advisory-locked on Postgres); "
                        "creates the storage bucket when SODM_STORAGE_URL allows")
    sp.set_defaults(func=_cmd_migrate)
    sp = sub.add_parser("backfill-hashes",
                        help="compute the content hash of datasets stored without one")
    sp.set_defaults(func=_cmd_backfill_hashes)
    sp = sub.add_parser("create-key", help="create an API key (printed once)")
    sp.add_argument("--tenant", required=True)
    sp.add_argument("--name", default="", help="a label for the key")
    sp.set_defaults(func=_cmd_create_key)
    sp = sub.add_parser("revoke-key", help="revoke keys by prefix (or the full key)")
    sp.add_argument("prefix")
    sp.set_defaults(func=_cmd_revoke_key)
    sp = sub.add_parser("list-keys", help="list keys (prefixes only)")
    sp.add_argument("--tenant")
    sp.set_defaults(func=_cmd_list_keys)
    sp = sub.add_parser("run", help="quick start: migrate, create a key, API + one worker")
    sp.add_argument("--host")
    sp.add_argument("--port", type=int)
    _serving_options(sp)
    sp.set_defaults(func=_cmd_run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; a bad setting, an unreachable database or an unusable data directory
    is one line on stderr and exit status 2, not a traceback."""
    from pydantic import ValidationError
    from sqlalchemy.exc import OperationalError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValidationError as exc:
        for e in exc.errors():
            name = ".".join(str(p) for p in e["loc"]).upper()
            _err(f"sodm: bad setting {name}={e.get('input')!r}: {e['msg']}")
    except OperationalError as exc:
        from sqlalchemy.engine import make_url

        url = make_url(get_settings().database_url).render_as_string(hide_password=True)
        _err(f"sodm: cannot use the database {url}: {str(exc.orig).splitlines()[0]}")
    except DataDirError as exc:
        _err(f"sodm: {exc}")
    return 2


class DataDirError(Exception):
    """``SODM_DATA_DIR`` cannot be created or written, or the store cannot be used."""


if __name__ == "__main__":
    sys.exit(main())
