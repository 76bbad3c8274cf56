"""Alembic environment: TrainGuard always hands over an open connection (trainguard/audit/migrate.py)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from trainguard.audit.tables import ALL_TABLES

target_metadata = ALL_TABLES[0].metadata


def run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:  # the developer CLI (`alembic revision --autogenerate`)
        url = context.config.get_main_option("sqlalchemy.url") or "sqlite://"
        with create_engine(url).connect() as conn:
            context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
        return
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run()
