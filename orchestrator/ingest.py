"""Stage 8b: finished attempts' metrics files read, validated and stored (idempotently, in batches).

`orch status` hands every attempt that ended in one poll to :func:`collect` at once: each
file is parsed and validated on its own (a bad one fails only its attempt, with the reason),
and the good ones are written with one bulk INSERT per table (:mod:`orchestrator.db.bulk`).
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pydantic_core
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.db.bulk import insert_rows
from orchestrator.db.models import Environment, Metrics, MetricValue, utcnow
from orchestrator.metrics_schema import HEADLINE_METRICS, MetricsFile


@dataclass
class IngestOutcome:
    ok: bool
    failure: str | None = None  # "missing_metrics" | "bad_metrics"
    reason: str | None = None


def read_metrics(path: Path) -> tuple[MetricsFile | None, IngestOutcome]:
    """Parse and validate one metrics file; the outcome says why it was refused."""
    metrics, outcome, _ = load_metrics(path)
    return metrics, outcome


def load_metrics(path: Path) -> tuple[MetricsFile | None, IngestOutcome, str]:
    """Read and validate one metrics file; also returns its text as it will be stored."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, IngestOutcome(False, "missing_metrics", f"no metrics file at {path}"), ""
    except OSError as exc:
        return None, IngestOutcome(False, "missing_metrics", f"cannot read {path}: {exc.strerror}"), ""
    return parse_metrics(raw, path.name)


def parse_metrics(raw: bytes | str, name: str = "metrics.json") -> tuple[MetricsFile | None, IngestOutcome, str]:
    """Validate one metrics document; also returns its text as it will be stored."""
    try:
        # pydantic's own JSON parser (faster than json.loads); NaN and Infinity refused anywhere,
        # since the stored document must stay valid JSON for PostgreSQL's json functions.
        data = pydantic_core.from_json(raw, allow_inf_nan=False, cache_strings="keys")
    except ValueError as exc:
        return None, IngestOutcome(False, "bad_metrics", f"{name}: {_json_problem(raw, exc)}"), ""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        return None, IngestOutcome(False, "bad_metrics", f"{name}: not valid JSON ({exc})"), ""
    if not isinstance(data, dict):
        return None, IngestOutcome(False, "bad_metrics", f"{name}: expected a JSON object"), ""
    try:
        return MetricsFile.model_validate(data), IngestOutcome(True), text
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        message = str(first["msg"]).removeprefix("Value error, ")
        return None, IngestOutcome(False, "bad_metrics", f"{name}: {where}: {message}"), ""


def _json_problem(raw: bytes | str, fast_error: ValueError) -> str:
    """Why a document is not JSON orch accepts, in the standard library's words (which name
    NaN/Infinity plainly); only bad files pay for the second parse."""
    try:
        json.loads(raw, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, or NaN/Infinity refused
        return f"not valid JSON ({exc})"
    return f"not valid JSON ({fast_error})"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number orch accepts")


# What a workload reports about one run rather than about its software and node: the command
# line, the scheduler's variables (job id, orch's run id), every rank's host. Left out of an
# environment's identity, or no two runs would ever share one; the whole document, these
# included, stays in ``metrics.raw``.
PER_RUN_ENV_KEYS = frozenset({"argv", "scheduler_env", "hostnames", "hostnames_by_rank"})


class EnvironmentCache:
    """Environment ids by content hash, so a batch stores each distinct environment (software
    versions, node, code revision) once, however many runs report it."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id_for(self, session: Session, env: dict) -> int | None:
        env = {key: value for key, value in env.items() if key not in PER_RUN_ENV_KEYS}
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


METRICS_COLUMNS = ("attempt_id", "environment_id", "schema", "device_model", "world_size", "code_revision",
                   "raw", "ingested_at", *HEADLINE_METRICS)
VALUE_COLUMNS = ("attempt_id", "name", "value")


def store_metrics_many(session: Session, items: Sequence[tuple[int, MetricsFile]],
                       environments: EnvironmentCache | None = None, raws: Sequence[str] | None = None) -> int:
    """Store the metrics of many attempts with one bulk INSERT per table (``metrics`` and
    ``metric_values``); attempts that already have metrics are left alone, so collecting twice
    changes nothing. ``raws``, when given, are the documents as read (stored instead of a
    re-serialisation). Returns how many attempts were added."""
    if not items:
        return 0
    environments = environments or EnvironmentCache()
    ids = [attempt_id for attempt_id, _ in items]
    present: set[int] = set()
    for chunk in range(0, len(ids), 5000):
        present.update(session.scalars(select(Metrics.attempt_id).where(Metrics.attempt_id.in_(ids[chunk:chunk + 5000]))))
    now = utcnow()
    rows: list[tuple] = []
    values: list[tuple] = []
    for index, (attempt_id, metrics) in enumerate(items):
        if attempt_id in present:
            continue
        present.add(attempt_id)
        env = metrics.env
        numbers = metrics.metrics
        raw = raws[index] if raws is not None else metrics.model_dump_json(by_alias=True)
        rows.append((attempt_id, environments.id_for(session, env), metrics.schema_, metrics.device.model,
                     metrics.world_size, _short(env.get("git_rev") or env.get("code_revision")), raw, now,
                     *[numbers.get(name) for name in HEADLINE_METRICS]))
        values.extend((attempt_id, name, value) for name, value in numbers.items() if value is not None)
    connection = session.connection()
    insert_rows(connection, Metrics.__table__, METRICS_COLUMNS, rows)  # type: ignore[arg-type]
    insert_rows(connection, MetricValue.__table__, VALUE_COLUMNS, values)  # type: ignore[arg-type]
    return len(rows)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while a batch is parsed. The documents are trees
    (freed by reference counting), but as thousands of them stay alive the collector rescans
    them over and over: about 16 us a document, a third of the ingest time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def collect(session: Session, files: Sequence[tuple[int, Path]],
            environments: EnvironmentCache | None = None) -> dict[int, IngestOutcome]:
    """Read, validate and store the metrics files of these attempts (``(attempt id, path)``).
    Each file is judged on its own; the outcome per attempt says why one was refused."""
    with gc_paused():
        return _collect(session, files, environments)


def _collect(session: Session, files: Sequence[tuple[int, Path]],
             environments: EnvironmentCache | None) -> dict[int, IngestOutcome]:
    outcomes: dict[int, IngestOutcome] = {}
    good: list[tuple[int, MetricsFile]] = []
    raws: list[str] = []
    for attempt_id, path in files:
        metrics, outcome, text = load_metrics(path)
        outcomes[attempt_id] = outcome
        if metrics is not None:
            good.append((attempt_id, metrics))
            raws.append(text)
    store_metrics_many(session, good, environments, raws)
    return outcomes

