"""The database as the report reads it: which views and columns exist, the sweep filter,
and labels for systems and configurations.

A figure whose view or column is missing (a database from before the migration that
added it, a view a later orch version brings) is skipped with a note, not an error:
``Source.missing`` says what is absent before any query runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import cached_property, lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine

# Workload parameters that say how long a run timed, not what it measured: left out of labels.
TIMING_PARAMS = frozenset({"warmup", "iters"})


class Source:
    """Read access to one database for one report, restricted to ``sweeps`` when given."""

    def __init__(self, engine: Engine, sweeps: Sequence[str] = ()) -> None:
        self.engine = engine
        self.sweeps = list(sweeps)

    @cached_property
    def relations(self) -> set[str]:
        inspector = sa.inspect(self.engine)
        return set(inspector.get_view_names()) | set(inspector.get_table_names())

    def columns(self, relation: str) -> set[str]:
        """Column names of a view or table (empty when it does not exist)."""
        cache: dict[str, set[str]] = self.__dict__.setdefault("_columns", {})
        if relation not in cache:
            if relation not in self.relations:
                cache[relation] = set()
            else:
                cache[relation] = {c["name"] for c in sa.inspect(self.engine).get_columns(relation)}
        return cache[relation]

    def missing(self, relation: str, columns: Iterable[str]) -> str | None:
        """Why ``relation`` cannot serve a figure (absent, or lacking ``columns``), or None."""
        if relation not in self.relations:
            return f"this database has no {relation} view"
        absent = sorted(set(columns) - self.columns(relation))
        if absent:
            return (f"the {relation} view of this database lacks {', '.join(absent)} "
                    "(an older schema: `orch db upgrade`)")
        return None

    def where_sweep(self, alias: str = "") -> str:
        """`` AND <alias>sweep IN (...)`` when the report is restricted to sweeps, else empty."""
        if not self.sweeps:
            return ""
        return f" AND {alias + '.' if alias else ''}sweep IN :sweeps"

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        """Rows of ``sql`` as dicts (remembered: figures reading the same view share one query;
        callers must not change the rows). Each query has its own connection: on PostgreSQL a
        failed statement ends its transaction, and it must not take the next figure's with it."""
        memo: dict[str, list[dict[str, Any]]] = self.__dict__.setdefault("_memo", {})
        key = sql + "\x00" + repr(sorted(params.items()))
        if key not in memo:
            memo[key] = self._execute(sql, dict(params))
        return memo[key]

    def _execute(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        statement = sa.text(sql)
        if ":sweeps" in sql:
            statement = statement.bindparams(sa.bindparam("sweeps", expanding=True))
            params["sweeps"] = self.sweeps
        for name, value in params.items():
            if isinstance(value, (list, tuple)) and name != "sweeps":
                statement = statement.bindparams(sa.bindparam(name, expanding=True))
        with self.engine.connect() as connection:
            result = connection.execute(statement, params)
            keys = list(result.keys())
            return [dict(zip(keys, row)) for row in result]

    def sampled(self, select: str, relation_where: str, limit: int, **params: Any) -> tuple[list[dict[str, Any]], int]:
        """``SELECT <select> FROM <relation_where>``, at most ``limit`` rows: every k-th by run id
        (k = ceil(n / limit)) when there are more. Returns the rows and n."""
        total = self.query(f"SELECT COUNT(*) AS n FROM {relation_where}", **params)[0]["n"]
        if total <= limit:
            return self.query(f"SELECT {select} FROM {relation_where}", **params), total
        step = -(-total // limit)
        rows = self.query(f"SELECT * FROM (SELECT {select}, ROW_NUMBER() OVER (ORDER BY run_id) AS row_number_ "
                          f"FROM {relation_where}) numbered WHERE (row_number_ - 1) % {step} = 0", **params)
        return rows, total

    def known_sweeps(self) -> list[str]:
        return [r["sweep"] for r in self.query("SELECT DISTINCT sweep FROM results ORDER BY sweep")]


def key_of(row: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    """A row's values of ``columns`` as a grouping key. Python's 2 == 2.0 (same hash), so a key
    matches across a view that CASTs an integer column to REAL."""
    return tuple([row.get(c) for c in columns])


def params_of(row: dict[str, Any]) -> dict[str, Any]:
    """The workload parameters of a row (parsed once per distinct text; do not modify)."""
    return _parsed(row.get("params") or "{}")


@lru_cache(maxsize=65536)
def _parsed(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def shorten(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def system_label(row: dict[str, Any]) -> str:
    """``site[:system] (device model)``: what a bar or line is measured on."""
    where = row.get("site") or "?"
    if row.get("system"):
        where += f":{row['system']}"
    model = row.get("device_model")
    if model:
        model = model.replace("(R)", "").replace("(TM)", "").replace("  ", " ").strip()
        where += f" ({shorten(model, 28)})"
    return where


def config_label(row: dict[str, Any], drop: Iterable[str] = (), devices: bool = True) -> str:
    """The configuration of a result in words: devices, strategy, batch, sequence length and
    the workload parameters (not the timing ones), less the keys in ``drop``."""
    return _config_label(tuple(row.get(c) for c in _LABEL_COLUMNS), tuple(sorted(drop)), devices)


_LABEL_COLUMNS = ("devices", "strategy", "batch_size", "global_batch", "seq_len", "params")


@lru_cache(maxsize=65536)
def _config_label(values: tuple[Any, ...], drop: tuple[str, ...], devices: bool) -> str:
    row = dict(zip(_LABEL_COLUMNS, values))
    skip = set(drop) | TIMING_PARAMS
    parts = []
    if devices and "devices" not in skip and row.get("devices") is not None:
        parts.append(f"{row['devices']:g}dev" if isinstance(row["devices"], float) else f"{row['devices']}dev")
    for column, short in (("strategy", ""), ("batch_size", "b="), ("global_batch", "gb="), ("seq_len", "seq=")):
        value = row.get(column)
        if column not in skip and value is not None:
            parts.append(f"{short}{value:g}" if isinstance(value, float) else f"{short}{value}")
    params = params_of(row)
    parts += [f"{k}={v}" for k, v in sorted(params.items()) if k not in skip]
    return " ".join(parts) or "-"


def number(value: Any) -> float | None:
    """A finite float, or None (NULL, NaN, text)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return result if result == result and result not in (float("inf"), float("-inf")) else None
