"""`make test` on a machine with no Postgres or Redis: with ``SODM_TEST_SERVICES=throwaway``
the fixtures start their own servers (tests/fixtures/services.py), as they do when nothing
answers on 127.0.0.1:5432 / :6379; an in-process upload and a real uvicorn's /readyz pass on
them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_tests_run_on_throwaway_postgres_and_redis(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["SODM_TEST_SERVICES"] = "throwaway"
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "from tests.fixtures.services import postgres, redis_server\n"
        "def test_servers_are_throwaway(pg_url, stack_env):\n"
        "    assert postgres().origin == redis_server().origin == 'throwaway'\n"
        "    assert f':{postgres().port}/' in pg_url\n"
        "    assert f':{redis_server().port}/' in stack_env['CELERY_BROKER_URL']\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
         "-c", str(ROOT / "pyproject.toml"), str(probe),
         "tests/service/test_datasets.py::test_upload_heart_scale_parquet",
         "tests/service/test_health.py::test_readyz_ok_on_the_real_stack"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "3 passed" in out.stdout, out.stdout[-2000:]
