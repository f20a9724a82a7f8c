"""Root pytest configuration: the shared fixtures (``tests/fixtures/*``, one module per part
of the stack) and the test tiers.

Tiers are markers applied here, by directory and by the fixtures a test uses, so new tests
get them without writing them: ``spark`` (starts Spark), ``browser`` (drives chromium),
``stack`` (starts service processes: uvicorn, Celery workers, ``sodm run``), ``slow`` (long
by design: load, soak, fuzzing, benchmarks, fresh installs). What carries none of them is
the fast tier (``make test-fast``): the solver and the in-process API (``api`` fixture) on
the real Postgres.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# The solver-only install (``pip install .``, no service extra) runs tests/solver with the
# fixtures below left out: they import the service's packages.
pytest_plugins = [
    "tests.fixtures.stack",
    "tests.fixtures.inprocess",
    "tests.fixtures.worker",
    "tests.fixtures.spark",
    "tests.fixtures.browser",
] if importlib.util.find_spec("fastapi") is not None else []

REPO_ROOT = Path(__file__).resolve().parents[1]
DATASETS_DIR = (REPO_ROOT.parent / "shared" / "datasets").resolve()
TESTS = Path(__file__).resolve().parent

# marker -> the test directories (relative to tests/) and fixtures that imply it
BY_DIRECTORY = {"spark": ("spark",), "browser": ("browser",), "stack": ("reliability",),
                "slow": ("bench",)}
BY_FIXTURE = {
    "spark": ("spark_local_master", "spark_standalone", "spark_connect_server"),
    "browser": ("browser", "page_guard"),
    "stack": ("api_server", "start_api", "start_api_module", "client", "worker",
              "start_worker", "start_worker_module"),
}
# tests that start service processes themselves (subprocess) in modules of the fast tier
BY_TEST = {
    "stack": ("service/test_serving.py::test_metrics_add_up_across_serve_workers",
              "service/test_migrations.py::test_concurrent_migrate_commands_serialise"),
}
# modules that start service processes themselves, and the long ones of each directory
BY_MODULE = {
    "stack": ("service/test_cli.py", "service/test_embedded.py", "test_quickstart.py",
              "test_throwaway_services.py"),
    "slow": ("reliability/test_soak.py", "reliability/test_load.py",
             "reliability/test_schemathesis.py", "test_quickstart.py"),
}


def tiers_of(item: pytest.Item) -> set[str]:
    """The tier markers a collected test gets from its path and fixtures."""
    try:
        rel = Path(str(item.path)).resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return set()
    fixtures = set(getattr(item, "fixturenames", ()))
    out = set()
    for marker, dirs in BY_DIRECTORY.items():
        if any(rel.startswith(d + "/") for d in dirs):
            out.add(marker)
    for marker, names in BY_FIXTURE.items():
        if fixtures.intersection(names):
            out.add(marker)
    for marker, modules in BY_MODULE.items():
        if rel in modules:
            out.add(marker)
    name = getattr(item, "originalname", item.name)
    for marker, tests in BY_TEST.items():
        if f"{rel}::{name}" in tests:
            out.add(marker)
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(tiers_of(item)):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The shared benchmark datasets (LIBSVM text, xz). Missing data is an error, not a skip."""
    if not DATASETS_DIR.is_dir():
        raise RuntimeError(f"shared datasets not found at {DATASETS_DIR}")
    return DATASETS_DIR
