"""Stage 8b: a finished attempt's metrics file read, validated and stored (idempotently)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db.models import Attempt, Environment, Metrics
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


def _environment_id(session: Session, env: dict) -> int | None:
    if not env:
        return None
    text = json.dumps(env, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()
    found = session.scalar(select(Environment.id).where(Environment.content_hash == digest))
    if found is not None:
        return found
    record = Environment(content_hash=digest, data=text, python=_short(env.get("python")),
                         torch=_short(env.get("torch")), cuda=_short(env.get("cuda")),
                         hostname=_short(env.get("hostname")))
    with session.begin_nested():
        session.add(record)
    return record.id


def _short(value: object) -> str | None:
    return None if value is None else str(value)[:200]


def store_metrics(session: Session, attempt: Attempt, metrics: MetricsFile) -> bool:
    """Add the metrics row of ``attempt``; False (and nothing written) if it is already there."""
    if session.get(Metrics, attempt.id) is not None:
        return False
    headline = metrics.headline()
    session.add(Metrics(
        attempt_id=attempt.id, environment_id=_environment_id(session, metrics.env),
        schema=metrics.schema_, device_model=metrics.device.model, world_size=metrics.world_size,
        code_revision=_short(metrics.env.get("git_rev") or metrics.env.get("code_revision")),
        raw=metrics.model_dump_json(by_alias=True), **{name: headline[name] for name in HEADLINE_METRICS},
    ))
    return True
