"""The glossary (db/glossary.yaml, db/glossary_metrics.yaml): one definition per column of every
view and per metric a workload reports. `orch glossary` prints it; the tests check that no view
has a column it lacks."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import yaml
from sqlalchemy import Connection, inspect

from orchestrator.paths import data_dir
from orchestrator.results.db.views import VIEW_NAMES


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    root = data_dir("db")
    doc = yaml.safe_load((root / "glossary.yaml").read_text())
    metrics_file = root / "glossary_metrics.yaml"
    doc["metrics"] = yaml.safe_load(metrics_file.read_text()) if metrics_file.is_file() else {}
    return doc  # type: ignore[no-any-return]


def views() -> tuple[str, ...]:
    return tuple(reversed(VIEW_NAMES))  # results first


def definition(view: str, column: str) -> dict[str, Any] | None:
    doc = load()
    own = (doc.get("views") or {}).get(view, {}).get(column)
    return own if own is not None else doc["columns"].get(column)


def view_columns(connection: Connection, names: tuple[str, ...] | None = None) -> dict[str, list[str]]:
    inspector = inspect(connection)
    return {view: [c["name"] for c in inspector.get_columns(view)] for view in (names or views())}


def undefined(connection: Connection, names: tuple[str, ...] | None = None) -> list[str]:
    """``view.column`` for every column of a view (all of orch's by default) that the glossary
    does not define."""
    return [f"{view}.{column}" for view, columns in view_columns(connection, names).items() for column in columns
            if definition(view, column) is None]


def lookup(name: str | None) -> list[dict[str, Any]]:
    """Entries for a view (all its columns, in the order the shared section lists them), a
    column (in every view that defines it its own way, else the shared meaning), a metric
    name, or everything."""
    doc = load()
    shared: dict[str, Any] = doc["columns"]
    own: dict[str, dict[str, Any]] = doc.get("views") or {}
    entries: list[dict[str, Any]] = []
    if name is None or name == "metrics":
        entries += [{"view": "(all)", "column": c, **d} for c, d in shared.items()] if name is None else []
        entries += [{"view": "metric_values", "column": m, **d} for m, d in doc["metrics"].items()]
        for view, defined in own.items():
            entries += [{"view": view, "column": c, **d} for c, d in defined.items()] if name is None else []
        return entries
    if name in views():
        in_view = _columns_of_view_sql(name)
        return [{"view": name, "column": c, **(definition(name, c) or {"formula": "(undefined)"})} for c in in_view]
    for view, columns in own.items():
        if name in columns:
            entries.append({"view": view, "column": name, **columns[name]})
    if name in shared:
        entries.append({"view": "(all)", "column": name, **shared[name]})
    if name in doc["metrics"]:
        entries.append({"view": "metric_values", "column": name, **doc["metrics"][name]})
    return entries


@lru_cache(maxsize=None)
def _columns_of_view_sql(view: str) -> list[str]:
    """A view's columns, read from an in-memory SQLite database built from the view files (no
    connection to the user's database needed to explain it)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    from orchestrator.results.db.engine import upgrade

    engine = create_engine("sqlite://", poolclass=StaticPool)  # one in-memory database for both uses
    upgrade(engine)
    with engine.connect() as connection:
        return view_columns(connection)[view]
