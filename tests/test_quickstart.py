"""A new user's first steps, on fresh clones of this repository:

- ``make run`` on Python 3.13 installs the service lock alone into a new venv, starts, and
  the README's "Use it" commands run as written (only the port is changed, to a free one);
- ``pip install .`` on Python 3.12 installs the solver without the service, and solver tests
  pass there (the versions are the lock's, without its hashes, as constraints).

CI runs Python 3.11; these two prove the other supported versions. Both are slow (new venvs).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.fixtures.stack import free_port

ROOT = Path(__file__).resolve().parents[1]
SERVICE_ENV_MB = 760  # make run's venv after a run (696 MB on 2026-11-25); numba, pyarrow, scipy
SERVICE_VARS = ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR",
                "VIRTUAL_ENV")


def _python(version: str) -> dict[str, str]:
    """An environment in which ``python<version>`` runs that Python (pyenv or PATH)."""
    env = {k: v for k, v in os.environ.items()
           if k not in SERVICE_VARS and not k.startswith("SODM_")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep)
                                  if not p.startswith(str(ROOT)))
    if shutil.which("pyenv"):
        versions = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True,
                                  text=True).stdout.split()
        match = [v for v in versions if v.startswith(version + ".")]
        if match:
            env["PYENV_VERSION"] = match[-1]
    probe = subprocess.run([f"python{version}", "--version"], env=env, capture_output=True,
                           text=True)
    assert probe.returncode == 0, f"python{version} is needed for this test: {probe.stderr}"
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the committed tree (what a new user gets)."""
    dest = tmp_path_factory.mktemp("clone") / "sodm"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    return dest


def _readme_commands(readme: str) -> str:
    section = readme[readme.index("## Use it"):]
    m = re.search(r"```bash\n(.*?)```", section, re.S)
    assert m, "no bash block in the README's Use it section"
    return m.group(1)


@pytest.fixture
def make_run(clone: Path) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """``make run PYTHON=python3.13`` in the clone, on a free port; yields (url, proc, log)."""
    env = _python("3.13")
    port = free_port()
    env["SODM_PORT"] = str(port)
    log = clone / "make-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["make", "run", "PYTHON=python3.13"], cwd=clone, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900  # a first install downloads the 3.13 wheels
        while f"Dashboard/API: {url}" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.5)
        key = (clone / ".data" / "api-key").read_text().strip()
        while True:  # the worker's heartbeat: jobs will run
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/workers", headers={"Authorization": f"Bearer {key}"},
                             timeout=5).json().get("live") == 1:
                    break
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
            time.sleep(0.5)
        yield url, proc, log
    finally:
        family = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None \
            else []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def test_make_run_on_python_313_and_the_readme_verbatim(clone: Path, make_run) -> None:
    url, _proc, log = make_run
    printed = log.read_text(errors="replace")
    assert f"{url}/dashboard" in printed and "Next:" in printed

    script = _readme_commands((clone / "README.md").read_text())
    assert "http://127.0.0.1:8000" in script
    script = script.replace("http://127.0.0.1:8000", url)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=clone,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "event: state" in out.stdout and '"SUCCEEDED"' in out.stdout, out.stdout[-3000:]
    assert '"labels"' in out.stdout and '"decision_values"' in out.stdout, out.stdout[-2000:]
    assert '"model_name":"heart"' in out.stdout.replace(" ", "") and '"prod"' in out.stdout

    venv = clone / ".venv"
    version = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout
    assert version.strip() == "(3, 13)"
    for dev_only in ("pyspark", "playwright", "pytest", "schemathesis", "matplotlib"):
        found = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {dev_only}"],
                               capture_output=True)
        assert found.returncode != 0, f"{dev_only} is in the quick start's environment"
    size_mb = int(subprocess.run(["du", "-sm", str(venv)], capture_output=True,
                                 text=True).stdout.split()[0])
    print(f"quick start venv: {size_mb} MB")
    assert size_mb < SERVICE_ENV_MB


def test_the_solver_installs_and_tests_alone_on_python_312(clone: Path,
                                                           tmp_path: Path) -> None:
    env = _python("3.12")
    venv = tmp_path / "venv"
    subprocess.run(["python3.12", "-m", "venv", str(venv)], env=env, check=True)
    lock = (clone / "requirements" / "dev.txt").read_text().replace("\\\n", " ")
    pins = [re.sub(r"\s*--hash=\S+", "", ln).strip() for ln in lock.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    # --no-compile: the packages' bytecode is written as the tests import them, as make run
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--disable-pip-version-check", "--no-compile", "-c",
                          str(constraints), str(clone),
                          "pytest", "pytest-timeout"], env=env, capture_output=True, text=True,
                         timeout=900)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    py = str(venv / "bin" / "python")
    for service_only in ("fastapi", "sqlalchemy", "celery", "pyarrow"):
        assert subprocess.run([py, "-c", f"import {service_only}"],
                              capture_output=True).returncode != 0, service_only
    shutil.rmtree(clone / "build", ignore_errors=True)
    # -P and importlib mode: the tests import the installed package, not the clone's source
    where = subprocess.run([py, "-P", "-c", "import solver; print(solver.__file__)"],
                           cwd=clone, capture_output=True, text=True).stdout
    assert "site-packages" in where, where
    tests = subprocess.run([py, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "--import-mode=importlib",
                            "tests/solver/test_model_io.py", "tests/solver/test_formulation.py",
                            "tests/solver/test_margins.py"], cwd=clone, env=env,
                           capture_output=True, text=True, timeout=900)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert re.search(r"\d+ passed", tests.stdout) and "failed" not in tests.stdout
