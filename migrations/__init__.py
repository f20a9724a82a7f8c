"""Alembic migrations of the sodm schema (``alembic.ini``, ``env.py``, ``versions/``).

``alembic_config(url)`` gives a ready ``alembic.config.Config`` wherever the package is
installed; ``upgrade_head(url)`` is what ``sodm migrate`` and the test fixtures run.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def alembic_config(database_url: str | None = None):  # noqa: ANN201 - alembic imported lazily
    """An Alembic config for this package; ``database_url`` overrides app settings."""
    from alembic.config import Config

    cfg = Config(str(HERE / "alembic.ini"))
    cfg.set_main_option("script_location", str(HERE))
    if database_url:
        cfg.attributes["database_url"] = database_url
    return cfg


def upgrade_head(database_url: str | None = None) -> None:
    from alembic import command

    command.upgrade(alembic_config(database_url), "head")
