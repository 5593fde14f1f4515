"""Stage 8b: finished attempts' metrics files read, validated and stored (idempotently, in batches).

`orch status` hands every attempt that ended in one poll to :func:`collect` at once: each
file is parsed and validated on its own (a bad one fails only its attempt, with the reason),
and the good ones are written with one bulk INSERT per table (:mod:`orchestrator.results.db.bulk`).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.results.db.bulk import column_problem, insert_rows
from orchestrator.results.db.models import Environment, Metrics, MetricSeries, MetricValue, utcnow
from orchestrator.results.metrics_schema import HEADLINE_METRICS, MetricsFile, nul_path
from orchestrator.safefile import RefusedFile, open_regular, read_fd
from orchestrator.states import FailureClass


@dataclass
class IngestOutcome:
    ok: bool
    failure: FailureClass | None = None  # MISSING_METRICS or BAD_METRICS
    reason: str | None = None


def read_metrics(path: Path) -> tuple[MetricsFile | None, IngestOutcome]:
    """Parse and validate one metrics file; the outcome says why it was refused."""
    metrics, outcome, _ = load_metrics(path)
    return metrics, outcome


# A metrics file is a few KB; anything far larger is not one (and must not be read whole).
MAX_METRICS_BYTES = 16 * 1024 * 1024


def load_metrics(path: Path, private_dirs: int = 0) -> tuple[MetricsFile | None, IngestOutcome, str]:
    """Read and validate one metrics file; also returns its text as it will be stored.
    ``private_dirs``: as for :func:`read_bounded`."""
    raw = read_bounded(path, private_dirs=private_dirs)
    if isinstance(raw, IngestOutcome):
        return None, raw, ""
    return parse_metrics(raw, path.name)


def read_bounded(path: Path, limit: int = MAX_METRICS_BYTES, private_dirs: int = 0) -> bytes | IngestOutcome:
    """The bytes of a regular file of at most ``limit`` bytes, or why it is refused.

    A run directory is written by the job, so the file may be anything: never followed
    through a symbolic link (``O_NOFOLLOW``), never read unless it is a regular file (a FIFO
    would block forever, ``/dev/zero`` never ends: ``O_NONBLOCK`` then ``fstat``), never read
    when it has another name too (a hard link shows another run's file as this one's), and
    never read past the limit, whatever its size claims. ``private_dirs``: how many folders
    above the file orch made (a run's folder and its sweep's), opened without following a
    symbolic link, since a job could replace its run folder by a link to another run's."""
    try:
        fd = open_regular(path, follow=False, private_dirs=private_dirs, single_link=True)
    except FileNotFoundError:
        return IngestOutcome(False, FailureClass.MISSING_METRICS, f"no metrics file at {path}")
    except RefusedFile as exc:
        return IngestOutcome(False, FailureClass.BAD_METRICS, f"{path.name}: {exc.reason}")
    except OSError as exc:
        return IngestOutcome(False, FailureClass.MISSING_METRICS, f"cannot read {path}: {exc.strerror}")
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            return IngestOutcome(False, FailureClass.BAD_METRICS, f"{path.name}: {size} bytes, over the "
                                 f"{limit // (1024 * 1024)} MiB limit of a metrics file")
        data = read_fd(fd, limit)
        if data is None:
            return IngestOutcome(False, FailureClass.BAD_METRICS, f"{path.name}: over the "
                                 f"{limit // (1024 * 1024)} MiB limit of a metrics file")
        return data
    except OSError as exc:
        return IngestOutcome(False, FailureClass.MISSING_METRICS, f"cannot read {path}: {exc.strerror}")
    finally:
        os.close(fd)


def parse_metrics(raw: bytes | str, name: str = "metrics.json") -> tuple[MetricsFile | None, IngestOutcome, str]:
    """Validate one metrics document; also returns its text as it will be stored."""
    try:
        # pydantic's own JSON parser (faster than json.loads); NaN and Infinity refused anywhere,
        # since the stored document must stay valid JSON for PostgreSQL's json functions.
        data = pydantic_core.from_json(raw, allow_inf_nan=False, cache_strings="keys")
    except ValueError as exc:
        return None, IngestOutcome(False, FailureClass.BAD_METRICS, f"{name}: {_json_problem(raw, exc)}"), ""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        return None, IngestOutcome(False, FailureClass.BAD_METRICS, f"{name}: not valid JSON ({exc})"), ""
    if not isinstance(data, dict):
        return None, IngestOutcome(False, FailureClass.BAD_METRICS, f"{name}: expected a JSON object"), ""
    duplicate = _duplicate_key(raw, data)
    if duplicate is not None:
        return None, IngestOutcome(False, FailureClass.BAD_METRICS,
                                   f"{name}: duplicate key {duplicate!r} in one object"), ""
    try:
        return MetricsFile.model_validate(data), IngestOutcome(True), text
    except ValidationError as exc:
        first = exc.errors()[0]
        # A key may hold a NUL character, which the reason's own column cannot (PostgreSQL text).
        where = ".".join(str(p) for p in first["loc"]).replace("\x00", "\\0") or "(top level)"
        message = str(first["msg"]).removeprefix("Value error, ")
        return None, IngestOutcome(False, FailureClass.BAD_METRICS, f"{name}: {where}: {message}"), ""


def _json_problem(raw: bytes | str, fast_error: ValueError) -> str:
    """Why a document is not JSON orch accepts, in the standard library's words (which name
    NaN/Infinity plainly); only bad files pay for the second parse."""
    if "recursion limit" in str(fast_error):
        return "not valid JSON (nested too deeply)"
    try:
        json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, or NaN/Infinity refused
        return f"not valid JSON ({str(exc)[:300]})"
    return f"not valid JSON ({str(fast_error)[:300]})"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number orch accepts")


# A key's end in JSON text: its closing quote, optional blanks, the colon.
_SPACED_KEY_END = re.compile(rb'"[ \t\r\n]+:')


def _duplicate_key(raw: bytes | str, data: dict) -> str | None:
    """A key that appears twice in one object of the document, or None.

    The JSON parser keeps the last of duplicate keys silently. Checking every object with the
    standard library's parser would double the cost of a file, so a count decides first: each
    key of the text ends with ``":`` (when no blank precedes its colon), as does each escaped
    quote before a colon inside a string; the parsed tree counts its keys (lists of scalars
    skipped). No duplicates can hide when the text's count equals the tree's: a missing key
    makes the tree's count smaller, escapes and skipped lists only make the counts differ. Any
    difference, or a blank before a colon, goes to the exact check."""
    encoded = raw.encode() if isinstance(raw, str) else raw
    if encoded.count(b'":') == _count_keys(data) and _SPACED_KEY_END.search(encoded) is None:
        return None
    found: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict:
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys) and not found:
            found.append(next(key for key in keys if keys.count(key) > 1))
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None  # the fast parser read it; what to refuse is for validation to say
    return found[0] if found else None


def _count_keys(value: dict) -> int:
    count = len(value)
    for item in value.values():
        kind = type(item)
        if kind is dict:
            count += _count_keys(item)
        elif kind is list and item and type(item[0]) in (dict, list):
            count += _count_in_list(item)
    return count


def _count_in_list(values: list) -> int:
    count = 0
    for item in values:
        kind = type(item)
        if kind is dict:
            count += _count_keys(item)
        elif kind is list:
            count += _count_in_list(item)
    return count


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
            record = Environment(content_hash=digest, data=text,
                                 **{name: _text(env.get(name)) for name in _ENV_COLUMNS})
            session.add(record)
            session.flush()
            found = record.id
        self.ids[digest] = found
        return found


def _text(value: object) -> str | None:
    """An environment value as its column holds it (a version may come as a number)."""
    return None if value is None else str(value)


def _revision(env: dict[str, Any]) -> str | None:
    return _text(env.get("git_rev") or env.get("code_revision"))


_METRICS = Metrics.__table__.c
_ENVIRONMENTS = Environment.__table__.c
_VALUES = MetricValue.__table__.c
_SERIES = MetricSeries.__table__.c
# Environment columns filled from the file's ``env`` (EnvironmentCache.id_for).
_ENV_COLUMNS = ("python", "torch", "cuda", "hostname")


def storage_problem(metrics: MetricsFile) -> str | None:
    """Why a valid metrics file still cannot be stored, or None: a value that reaches a
    database column and does not fit it (``column_problem``: the column's own length and type,
    from the models, so no limit is copied here). Checked before anything is written, on every
    backend alike: PostgreSQL would refuse the whole batch of a poll for one such value, SQLite
    would store what PostgreSQL cannot."""
    env = metrics.env
    checks: list[tuple[str, Any, Any]] = [
        ("device.model", _METRICS.device_model, metrics.device.model),
        ("world_size", _METRICS.world_size, metrics.world_size),
        ("env.git_rev" if env.get("git_rev") else "env.code_revision", _METRICS.code_revision, _revision(env)),
        *((f"env.{name}", _ENVIRONMENTS[name], _text(env.get(name))) for name in _ENV_COLUMNS),
    ]
    for where, column, value in checks:
        problem = column_problem(column, value)
        if problem is not None:
            return f"{where}: {problem}"
    for name, number in metrics.metrics.items():
        problem = column_problem(_VALUES.name, name)
        if problem is not None:
            return f"metrics: the name {_clip(name)!r}: {problem}"
        problem = column_problem(_VALUES.value, number)
        if problem is not None:
            return f"metrics.{_clip(name)}: {problem}"
    for name in metrics.series:
        problem = column_problem(_SERIES.name, name)
        if problem is not None:
            return f"series: the name {_clip(name)!r}: {problem}"
    # Anywhere else in the stored document (params, extra keys): the views read it as JSON.
    nul = nul_path(metrics.model_dump(by_alias=True, exclude={"metrics", "series"}))
    if nul is not None:
        return f"{nul}: holds a NUL character (\\u0000), which PostgreSQL's JSON functions refuse"
    return None


def _clip(name: str) -> str:
    """A name short enough for a reason (the whole of it may be what was refused)."""
    return name if len(name) <= 40 else name[:40] + "..."


METRICS_COLUMNS = ("attempt_id", "environment_id", "schema", "device_model", "world_size", "code_revision",
                   "raw", "ingested_at", *HEADLINE_METRICS)
VALUE_COLUMNS = ("attempt_id", "name", "value")
SERIES_COLUMNS = ("attempt_id", "name", "step", "value")


def series_rows(attempt_id: int, metrics: MetricsFile) -> list[tuple]:
    """The rows of ``metric_series`` for one file's per-step series (``series`` of the file)."""
    return [(attempt_id, name, step, value) for name, series in metrics.series.items()
            for step, value in zip(series.steps, series.values)]


def store_metrics_many(session: Session, items: Sequence[tuple[int, MetricsFile]],
                       environments: EnvironmentCache | None = None, raws: Sequence[str] | None = None) -> int:
    """Store the metrics of many attempts with one bulk INSERT per table (``metrics``,
    ``metric_values`` and ``metric_series``); attempts that already have metrics are left alone,
    so collecting twice changes nothing. ``raws``, when given, are the documents as read (stored instead of a
    re-serialisation). Returns how many attempts were added."""
    if not items:
        return 0
    environments = environments or EnvironmentCache()
    ids = [attempt_id for attempt_id, _ in items]
    present: set[int] = set()
    for chunk in range(0, len(ids), 5000):
        batch = ids[chunk:chunk + 5000]
        present.update(session.scalars(select(Metrics.attempt_id).where(Metrics.attempt_id.in_(batch))))
    now = utcnow()
    rows: list[tuple] = []
    values: list[tuple] = []
    points: list[tuple] = []
    for index, (attempt_id, metrics) in enumerate(items):
        if attempt_id in present:
            continue
        present.add(attempt_id)
        env = metrics.env
        numbers = metrics.metrics
        raw = raws[index] if raws is not None else metrics.model_dump_json(by_alias=True)
        rows.append((attempt_id, environments.id_for(session, env), metrics.schema_, metrics.device.model,
                     metrics.world_size, _revision(env), raw, now,
                     *[numbers.get(name) for name in HEADLINE_METRICS]))
        values.extend((attempt_id, name, value) for name, value in numbers.items() if value is not None)
        points.extend(series_rows(attempt_id, metrics))
    connection = session.connection()
    insert_rows(connection, Metrics.__table__, METRICS_COLUMNS, rows)  # type: ignore[arg-type]
    insert_rows(connection, MetricValue.__table__, VALUE_COLUMNS, values)  # type: ignore[arg-type]
    insert_rows(connection, MetricSeries.__table__, SERIES_COLUMNS, points)  # type: ignore[arg-type]
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


# The bytes of metrics files one poll reads: each file's document becomes Python objects several
# times its size (24 files of 11 MB took 3.9 GB in one poll, issue 53). Past it, the ended runs
# left wait for the next poll; one file is always read, so every poll makes progress.
POLL_READ_BYTES = 64 * 1024 * 1024


def within_read_budget(files: Sequence[tuple[int, Path]], budget: int = POLL_READ_BYTES,
                       ) -> tuple[list[tuple[int, Path]], list[tuple[int, Path]]]:
    """(the files this poll reads, those left for the next) in their order: by the sizes the
    files claim now. A file that cannot be looked at, or that is refused unread (over
    MAX_METRICS_BYTES, not a regular file), costs nothing and counts as empty."""
    taken: list[tuple[int, Path]] = []
    total = 0
    for index, (attempt_id, path) in enumerate(files):
        try:
            info = os.lstat(path)
            size = info.st_size if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_METRICS_BYTES else 0
        except OSError:
            size = 0
        if taken and total + size > budget:
            return taken, list(files[index:])
        taken.append((attempt_id, path))
        total += size
    return taken, []


def collect(session: Session, files: Sequence[tuple[int, Path]],
            environments: EnvironmentCache | None = None, private_dirs: int = 0) -> dict[int, IngestOutcome]:
    """Read, validate and store the metrics files of these attempts (``(attempt id, path)``).
    Each file is judged on its own; the outcome per attempt says why one was refused.
    ``private_dirs``: the folders above each file that orch made (:func:`read_bounded`)."""
    with gc_paused():
        return _collect(session, files, environments, private_dirs)


def _collect(session: Session, files: Sequence[tuple[int, Path]],
             environments: EnvironmentCache | None, private_dirs: int) -> dict[int, IngestOutcome]:
    outcomes: dict[int, IngestOutcome] = {}
    good: list[tuple[int, MetricsFile]] = []
    raws: list[str] = []
    for attempt_id, path in files:
        metrics, outcome, text = load_metrics(path, private_dirs)
        if metrics is not None:
            problem = storage_problem(metrics)
            if problem is not None:  # every backend refuses it alike, before anything is written
                metrics, outcome = None, IngestOutcome(False, FailureClass.BAD_METRICS, f"{path.name}: {problem}")
        outcomes[attempt_id] = outcome
        if metrics is not None:
            good.append((attempt_id, metrics))
            raws.append(text)
    store_metrics_many(session, good, environments, raws)
    return outcomes

