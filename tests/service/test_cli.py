"""The ``sodm`` command line as real subprocesses: key management against the session's
Postgres and API server, and ``sodm run`` (the embedded quick start) end to end."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from tests.fixtures.stack import REPO_ROOT, free_port

STACK_VARS = ("DATABASE_URL", "CELERY_BROKER_URL", "SODM_DATA_DIR", "SODM_CELERY_QUEUE",
              "SODM_RATE_LIMIT_PER_MINUTE")


def sodm(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_entry_point_is_declared() -> None:
    text = (REPO_ROOT / "pyproject.toml").read_text()
    assert re.search(r'^sodm = "app\.cli:main"$', text, re.M)
    from app.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices  # noqa: SLF001
    assert {"serve", "worker", "migrate", "create-key", "revoke-key", "list-keys",
            "run"} <= set(sub)


def test_create_list_revoke_key(api_server: str, stack_env: dict[str, str]) -> None:
    env = {**os.environ, **stack_env}
    r = sodm("create-key", "--tenant", "cli-tenant", "--name", "ci", env=env)
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    assert re.fullmatch(r"sodm_[A-Za-z0-9_-]{32}", key)  # stdout is the key alone
    auth = {"Authorization": f"Bearer {key}"}
    assert httpx.get(api_server + "/datasets", headers=auth).status_code == 200

    listing = sodm("list-keys", "--tenant", "cli-tenant", env=env)
    assert listing.returncode == 0
    assert key[:12] in listing.stdout and key not in listing.stdout
    assert "active" in listing.stdout

    assert sodm("revoke-key", "sodm_", env=env).returncode == 2  # too short to be safe
    r = sodm("revoke-key", key[:12], env=env)
    assert r.returncode == 0 and "revoked 1" in r.stdout
    # the API cached the key: the revocation reaches it over Redis (the TTL bounds a loss)
    deadline = time.monotonic() + 5
    while httpx.get(api_server + "/datasets", headers=auth).status_code != 401:
        assert time.monotonic() < deadline, "a revoked key still works after the cache TTL"
        time.sleep(0.05)
    assert "revoked" in sodm("list-keys", "--tenant", "cli-tenant", env=env).stdout
    assert sodm("revoke-key", key[:12], env=env).returncode == 1  # nothing live matches


def test_run_quick_start_on_embedded_defaults(tmp_path: Path) -> None:
    """``sodm run`` with no DATABASE_URL/broker: SQLite + kombu SQLAlchemy transport."""
    env = {k: v for k, v in os.environ.items() if k not in STACK_VARS}
    port = free_port()
    env.update(SODM_DATA_DIR=str(tmp_path / "data"), SODM_PORT=str(port),
               PYTHONUNBUFFERED="1")
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "run"], cwd=REPO_ROOT,
                                env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    children: list[psutil.Process] = []
    try:
        key = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and key is None:
            assert proc.poll() is None, log.read_text()
            m = re.search(r"^API key: (sodm_\S+)$", log.read_text(), re.M)
            key = m.group(1) if m else None
            time.sleep(0.3)
        assert key, log.read_text()
        assert f"Dashboard/API: http://127.0.0.1:{port}" in log.read_text()
        url = f"http://127.0.0.1:{port}"
        ready = None
        while time.monotonic() < deadline:
            try:
                ready = httpx.get(url + "/readyz", timeout=5)
                if ready.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert ready is not None and ready.status_code == 200
        r = httpx.get(url + "/datasets", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200 and r.json()["items"] == []
        assert (tmp_path / "data" / "sodm.db").is_file()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2  # uvicorn and the celery worker (+ its pool child)
        while " ready." not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.3)  # let the worker finish starting before stopping it
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, alive
    finally:  # on failure, stop exactly the processes this test started
        if proc.poll() is None:
            children = children or psutil.Process(proc.pid).children(recursive=True)
            proc.kill()
            proc.wait()
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()


def test_worker_ping_healthcheck(start_worker, stack_env: dict[str, str]) -> None:
    w = start_worker()
    env = {**os.environ, **stack_env}
    r = sodm("worker-ping", "--name", w.name, env=env)
    assert r.returncode == 0, r.stderr
    assert "pong" in r.stdout
    r = sodm("worker-ping", "--name", "celery@no-such-node", "--timeout", "1", env=env)
    assert r.returncode == 1 and "no reply" in r.stderr


def test_spark_connect_ping_and_command() -> None:
    import socket

    from app.cli import spark_connect_command

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        r = sodm("spark-connect-ping", "--port", str(port), env=dict(os.environ))
        assert r.returncode == 0, r.stderr
    r = sodm("spark-connect-ping", "--port", str(free_port()), "--timeout", "1",
             env=dict(os.environ))
    assert r.returncode == 1 and "unreachable" in r.stderr
    cmd, env = spark_connect_command("0.0.0.0", 15002, "local[*]")
    assert Path(cmd[0]).name == "spark-submit" and os.access(cmd[0], os.X_OK)
    assert "spark.connect.grpc.binding.port=15002" in cmd
    assert env["PYSPARK_PYTHON"] == sys.executable


def test_spark_cluster_commands() -> None:
    """``sodm spark-master`` / ``spark-worker`` run the wheel's standalone daemons with this
    interpreter for the executors' Python workers; ``spark-ping`` checks their ports."""
    import socket

    from app.cli import spark_master_command, spark_worker_command

    cmd, env = spark_master_command("0.0.0.0", 7077, 8080)
    assert Path(cmd[0]).name == "spark-class" and os.access(cmd[0], os.X_OK)
    assert cmd[1] == "org.apache.spark.deploy.master.Master" and "7077" in cmd
    cmd, env = spark_worker_command("spark://m:7077", 2, "1g", 8081)
    assert cmd[1:3] == ["org.apache.spark.deploy.worker.Worker", "spark://m:7077"]
    assert cmd[cmd.index("--cores") + 1] == "2" and cmd[cmd.index("--memory") + 1] == "1g"
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert (Path(env["SPARK_HOME"]) / "jars").is_dir()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        r = sodm("spark-ping", "--port", str(listener.getsockname()[1]), env=dict(os.environ))
        assert r.returncode == 0 and "listening" in r.stdout, r.stderr


def test_bad_settings_database_and_data_dir_are_one_line_and_exit_2(tmp_path: Path) -> None:
    """An operator's mistake is one line naming the setting (the database URL without its
    password), exit status 2, no traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = [
        ("migrate", {"SODM_LIMIT_FEATURES": "abc"},
         "sodm: bad setting SODM_LIMIT_FEATURES='abc': "),
        ("migrate", {"DATABASE_URL": "postgresql://someone:s3cret@127.0.0.1:1/x"},
         "sodm: cannot use the database postgresql://someone:***@127.0.0.1:1/x: "),
        ("run", {"SODM_DATA_DIR": str(blocker / "data")},
         f"sodm: cannot create the data directory {blocker / 'data'} (SODM_DATA_DIR): "),
    ]
    for command, extra, start in cases:
        r = sodm(command, env={**os.environ, **extra})
        assert r.returncode == 2, (command, extra, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), r.stderr
        assert "Traceback" not in r.stderr and "s3cret" not in r.stderr
