"""Alembic environment: orch passes the connection in ``config.attributes``."""

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:  # run from the alembic CLI with sqlalchemy.url set
    from sqlalchemy import create_engine

    engine = create_engine(context.config.get_main_option("sqlalchemy.url"))
    with engine.connect() as connection:
        context.configure(connection=connection, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
