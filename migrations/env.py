"""Alembic environment: the URL comes from ``app.core.config`` (or the caller), the target
metadata from ``app.core.orm``; SQLite runs in batch mode so ALTERs work there too."""

from __future__ import annotations

import logging.config

from alembic import context
from sqlalchemy import create_engine, pool

from app.core.config import get_settings
from app.core.orm import Base

config = context.config
if config.config_file_name and not config.attributes.get("skip_logging"):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("database_url") or get_settings().resolved_database_url
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def _configure(**kwargs) -> None:  # noqa: ANN003
    url = kwargs.pop("url", None) or _url()
    context.configure(
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=url.startswith("sqlite"),
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection, url=str(connection.engine.url))
        with context.begin_transaction():
            context.run_migrations()
        return
    url = _url()
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as conn:
        _configure(connection=conn, url=url)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
