"""The SQL views as of the newest migration, and re-creating them where one was dropped.

Each migration freezes the view files it used; this module names the newest ones, so
`orch db upgrade` can put back a view a user dropped (``DROP VIEW results``) without a
migration of its own.
"""

from __future__ import annotations

from sqlalchemy import Connection, inspect

from orchestrator.paths import db_views_dir

RESULTS_SQL = "results_0005.sql"
DERIVED_SQL = "derived_0005.sql"
# Dependants first: PostgreSQL refuses to drop a view that another one reads.
VIEW_NAMES = ("serving", "prediction_error", "inference", "reference_check", "provenance", "cost", "scaling",
              "repeat_spread", "throughput", "results")
INFERENCE_SQL = "inference_0013.sql"  # replaces inference_0006.sql: counts as integers, p99_note
PREDICTION_ERROR_SQL = "prediction_error_0008.sql"
COST_SQL = "cost_0011.sql"  # replaces derived_0005.sql's cost view
SERVING_SQL = "serving_0015.sql"  # replaces serving_0012.sql: charged devices, usd_per_million_*
# params is JSON text: each dialect has its own lookup (as in migration 0006).
_MODEL = {"sqlite": "json_extract(rr.params, '$.model')", "postgresql": "(rr.params::json ->> 'model')"}
# The metrics file's timed steps (the inference view's TTFT samples), as migration 0013 fills them in.
_SAMPLES = {"sqlite": "(CASE WHEN json_valid(mt.raw) THEN json_extract(mt.raw, '$.timing.timed_steps') END)",
            "postgresql": "(mt.raw::json -> 'timing' ->> 'timed_steps')"}


def statements(dialect: str = "sqlite") -> list[str]:
    """The CREATE VIEW statements, ``results`` first."""
    views = db_views_dir()
    derived = (views / DERIVED_SQL).read_text().split("\n;;\n")
    derived = [s for s in derived if s.strip() and "CREATE VIEW cost AS" not in s]
    inference = (views / INFERENCE_SQL).read_text().replace("{model}", _MODEL.get(dialect, "NULL")).replace(
        "{samples}", _SAMPLES.get(dialect, "NULL"))
    serving = (views / SERVING_SQL).read_text()
    for name in ("model", "backend", "arrival"):  # as migrations 0012 and 0015 fill them in
        lookup = _MODEL.get(dialect)
        serving = serving.replace("{" + name + "}", lookup.replace("model", name) if lookup else "NULL")
    return [(views / RESULTS_SQL).read_text(), *derived, (views / COST_SQL).read_text(), inference,
            (views / PREDICTION_ERROR_SQL).read_text(), serving]


def missing_views(connection: Connection) -> list[str]:
    present = set(inspect(connection).get_view_names())
    return [name for name in VIEW_NAMES if name not in present]


def recreate_views(connection: Connection) -> list[str]:
    """Drop and re-create every view (inside the caller's transaction); returns the names
    that were missing before."""
    missing = missing_views(connection)
    for name in VIEW_NAMES:
        connection.exec_driver_sql(f"DROP VIEW IF EXISTS {name}")
    for statement in statements(connection.dialect.name):
        connection.exec_driver_sql(statement)
    return missing
