"""Root pytest configuration: shared fixtures live in ``tests/fixtures/*`` (one module per part
of the real stack) and are registered here so every test directory can use them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = [
    "tests.fixtures.stack",
    "tests.fixtures.worker",
    "tests.fixtures.spark",
    "tests.fixtures.browser",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
DATASETS_DIR = (REPO_ROOT.parent / "shared" / "datasets").resolve()


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    """The shared benchmark datasets (LIBSVM text, xz). Missing data is an error, not a skip."""
    if not DATASETS_DIR.is_dir():
        raise RuntimeError(f"shared datasets not found at {DATASETS_DIR}")
    return DATASETS_DIR
