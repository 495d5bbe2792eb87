"""Alembic environment: run migrations on the connection that `kubeprof.storage` hands in."""

from alembic import context

from kubeprof.storage.models import Base

config = context.config
connection = config.attributes.get("connection")

if connection is None:  # `alembic` CLI use: build an engine from the configured URL
    from sqlalchemy import create_engine

    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
