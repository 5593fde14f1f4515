"""Stage 8b: a finished attempt's metrics file read, validated and stored (idempotently)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from orchestrator.db.models import Attempt, Environment, Metrics, MetricValue, utcnow
from orchestrator.metrics_schema import HEADLINE_METRICS, MetricsFile


@dataclass
class IngestOutcome:
    ok: bool
    failure: str | None = None  # "missing_metrics" | "bad_metrics"
    reason: str | None = None


def read_metrics(path: Path) -> tuple[MetricsFile | None, IngestOutcome]:
    """Parse and validate one metrics file; the outcome says why it was refused."""
    if not path.exists():
        return None, IngestOutcome(False, "missing_metrics", f"no metrics file at {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        return None, IngestOutcome(False, "bad_metrics", f"{path.name}: not valid JSON ({exc})")
    if not isinstance(data, dict):
        return None, IngestOutcome(False, "bad_metrics", f"{path.name}: expected a JSON object")
    try:
        return MetricsFile.model_validate(data), IngestOutcome(True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        message = str(first["msg"]).removeprefix("Value error, ")
        return None, IngestOutcome(False, "bad_metrics", f"{path.name}: {where}: {message}")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number orch accepts")


class EnvironmentCache:
    """Environment ids by content hash, so a batch stores each distinct environment once."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id_for(self, session: Session, env: dict) -> int | None:
        if not env:
            return None
        text = json.dumps(env, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest in self.ids:
            return self.ids[digest]
        found = session.scalar(select(Environment.id).where(Environment.content_hash == digest))
        if found is None:
            record = Environment(content_hash=digest, data=text, python=_short(env.get("python")),
                                 torch=_short(env.get("torch")), cuda=_short(env.get("cuda")),
                                 hostname=_short(env.get("hostname")))
            session.add(record)
            session.flush()
            found = record.id
        self.ids[digest] = found
        return found


def _short(value: object) -> str | None:
    return None if value is None else str(value)[:200]


def metrics_row(attempt_id: int, metrics: MetricsFile, environment_id: int | None,
                raw: str | None = None) -> dict:
    headline = metrics.headline()
    return {
        "attempt_id": attempt_id, "environment_id": environment_id, "schema": metrics.schema_,
        "device_model": metrics.device.model, "world_size": metrics.world_size,
        "code_revision": _short(metrics.env.get("git_rev") or metrics.env.get("code_revision")),
        "raw": raw if raw is not None else metrics.model_dump_json(by_alias=True), "ingested_at": utcnow(),
        **{name: headline[name] for name in HEADLINE_METRICS},
    }


def store_metrics_many(session: Session, items: list[tuple[int, MetricsFile]],
                       environments: EnvironmentCache | None = None, raws: list[str] | None = None) -> int:
    """Store the metrics of many attempts in batched INSERTs (``metrics`` and ``metric_values``);
    attempts that already have metrics are left alone, so collecting twice changes nothing.
    ``raws``, when given, are the documents as read (stored instead of a re-serialisation).
    Returns how many attempts were added."""
    if not items:
        return 0
    environments = environments or EnvironmentCache()
    ids = [attempt_id for attempt_id, _ in items]
    present: set[int] = set()
    for chunk in range(0, len(ids), 5000):
        present.update(session.scalars(select(Metrics.attempt_id).where(Metrics.attempt_id.in_(ids[chunk:chunk + 5000]))))
    rows, values = [], []
    for index, (attempt_id, metrics) in enumerate(items):
        if attempt_id in present:
            continue
        present.add(attempt_id)
        rows.append(metrics_row(attempt_id, metrics, environments.id_for(session, metrics.env),
                                raws[index] if raws is not None else None))
        values.extend({"attempt_id": attempt_id, "name": name, "value": value}
                      for name, value in metrics.metrics.items() if value is not None)
    if rows:
        # Core inserts on the session's connection: one executemany per table, no ORM bookkeeping.
        connection = session.connection()
        connection.execute(insert(Metrics.__table__), rows)
        if values:
            connection.execute(insert(MetricValue.__table__), values)
    return len(rows)


def store_metrics(session: Session, attempt: Attempt, metrics: MetricsFile) -> bool:
    """Add the metrics row of ``attempt``; False (and nothing written) if it is already there."""
    session.flush()
    return store_metrics_many(session, [(attempt.id, metrics)]) == 1
