"""Reference figures: what a result is expected to reach, and which results fall short.

A reference is a figure for a workload and configuration (any field left out matches any
run), with its source and a tolerance: a published study's table, a vendor's number, or an
earlier sweep of ours (``from_sweep``). The ``reference_check`` view sets every completed
result beside the references that apply to it: ``below`` when it reaches less than
``1 - tolerance`` of the reference (a regression; 95% by default), ``above`` past
``1 + tolerance``, ``within`` otherwise.

Files: YAML (a list, or ``references:`` holding one) or CSV with the same field names as
columns; ``params`` is matched exactly against a run's workload parameters (all of them, as
the sweep gives them), so in CSV it is JSON text.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from orchestrator.errors import SourceError, UserError
from orchestrator.results.db.models import ReferenceFigure

DEFAULT_TOLERANCE = 0.05  # pass at >= 95% of the reference
MATCH_FIELDS = ("workload", "site", "system", "device_model", "precision", "devices", "strategy", "batch_size",
                "seq_len", "params")
Verdict = Literal["below", "within", "above"]


class ReferenceSpec(BaseModel):
    """One reference figure as a file gives it."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    workload: str = Field(min_length=1)
    site: str | None = None
    system: str | None = None
    device_model: str | None = None
    precision: str | None = None
    devices: int | None = Field(None, ge=1)
    strategy: str | None = None
    batch_size: int | None = Field(None, ge=1)
    seq_len: int | None = Field(None, ge=1)
    params: dict[str, Any] | None = None
    metric: str = Field(min_length=1)
    value: float = Field(gt=0)
    tolerance: float = Field(DEFAULT_TOLERANCE, ge=0, lt=1)
    source: str = Field(min_length=1)

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("expected a finite number")
        return value

    def params_text(self) -> str | None:
        # The same text plan stores in runs.params (json.dumps, sorted keys), so SQL can match it.
        return None if self.params is None else json.dumps(self.params, sort_keys=True)

    def key(self) -> str:
        match = {name: getattr(self, name) for name in MATCH_FIELDS if name != "params"}
        match["params"] = self.params_text()
        match["metric"] = self.metric
        return hashlib.sha256(json.dumps(match, sort_keys=True).encode()).hexdigest()


def _spec_error(file: str, line: int | None, index: int, exc: ValidationError) -> SourceError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or "(entry)"
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "missing":
        message = "required field missing"
    elif first["type"] == "extra_forbidden":
        message = f"unknown field (known: {', '.join(ReferenceSpec.model_fields)})"
    return SourceError(file, line, f"references[{index}].{field}", message)


def load_file(path: Path) -> list[ReferenceSpec]:
    """Reference figures from a YAML or CSV file; a mistake names the file, line and field."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        return _load_csv(path)
    from orchestrator.yamlsource import load_yaml

    doc = load_yaml(path)
    entries: Any = doc.data
    prefix: tuple[Any, ...] = ()
    if isinstance(entries, dict) and "references" in entries:
        entries, prefix = entries["references"], ("references",)
    if not isinstance(entries, list) or not entries:
        raise doc.error(prefix, "expected a non-empty list of references")
    specs: list[ReferenceSpec] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise doc.error(prefix + (index,), "expected a mapping (one reference)")
        try:
            specs.append(ReferenceSpec.model_validate(entry))
        except ValidationError as exc:
            loc = prefix + (index,) + tuple(exc.errors()[0]["loc"])[:1]
            raise _spec_error(str(path), doc.line_of(loc) or doc.line_of(prefix + (index,)), index, exc) from None
    return specs


def _load_csv(path: Path) -> list[ReferenceSpec]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: cannot read as CSV ({exc})") from None
    if not rows:
        raise UserError(f"{path}: no references (a header line and one row per reference expected)")
    specs: list[ReferenceSpec] = []
    for index, row in enumerate(rows):
        line = index + 2  # the header is line 1
        entry: dict[str, Any] = {k.strip(): v.strip() for k, v in row.items() if k and v is not None and v.strip()}
        if "params" in entry:
            try:
                entry["params"] = json.loads(entry["params"])
            except ValueError:
                raise SourceError(str(path), line, f"references[{index}].params",
                                  "expected JSON text, e.g. {\"m\": 256}") from None
        try:
            specs.append(ReferenceSpec.model_validate(entry))
        except ValidationError as exc:
            raise _spec_error(str(path), line, index, exc) from None
    return specs


def store(session: Session, specs: list[ReferenceSpec]) -> tuple[int, int]:
    """Add the references, replacing one that applies to the same configuration and metric;
    returns (added, replaced)."""
    added = replaced = 0
    for spec in specs:
        key = spec.key()
        row = session.scalar(select(ReferenceFigure).where(ReferenceFigure.key == key))
        if row is None:
            row = ReferenceFigure(key=key)
            session.add(row)
            added += 1
        else:
            replaced += 1
        for name in MATCH_FIELDS:
            setattr(row, name, spec.params_text() if name == "params" else getattr(spec, name))
        row.name, row.metric, row.value = spec.name, spec.metric, spec.value
        row.tolerance, row.source = spec.tolerance, spec.source
    session.flush()
    return added, replaced


def from_sweep(session: Session, sweep: str, metric: str | None = None, tolerance: float = DEFAULT_TOLERANCE,
               source: str | None = None) -> list[ReferenceSpec]:
    """References from an earlier sweep's completed results: per configuration, the mean of
    ``metric`` over its repeats (default: the configuration's headline throughput metric)."""
    rows = session.execute(text(
        "SELECT workload, site, system, device_model, precision, devices, strategy, batch_size, seq_len, params, "
        "throughput_metric, throughput, run_id FROM throughput WHERE sweep = :sweep"), {"sweep": sweep}).all()
    if not rows:
        raise UserError(f"sweep {sweep!r} has no completed results to take references from")
    groups: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        name = metric or row.throughput_metric
        if name is None:
            continue
        value = row.throughput if metric is None else _metric_of(session, row.run_id, name)
        if value is None:
            continue
        config = (row.workload, row.site, row.system, row.device_model, row.precision, row.devices, row.strategy,
                  row.batch_size, row.seq_len, row.params, name)
        groups.setdefault(config, []).append(float(value))
    if not groups:
        raise UserError(f"sweep {sweep!r}: no completed result reports {metric!r}")
    specs = []
    for config, values in groups.items():
        (workload, site, system, device_model, precision, devices, strategy, batch_size, seq_len, params,
         name) = config
        specs.append(ReferenceSpec(
            workload=workload, site=site, system=system, device_model=device_model, precision=precision,
            devices=devices, strategy=strategy, batch_size=batch_size, seq_len=seq_len,
            params=json.loads(params) if params else None, metric=name, value=sum(values) / len(values),
            tolerance=tolerance, source=source or f"orch sweep {sweep} (mean of {len(values)} result(s))"))
    return specs


def _metric_of(session: Session, run_id: str, name: str) -> float | None:
    return session.execute(text(
        "SELECT mv.value FROM metric_values mv JOIN result_rows rr ON rr.attempt_id = mv.attempt_id "
        "WHERE rr.run_id = :run AND rr.status = 'completed' AND mv.name = :name "
        "ORDER BY rr.attempt DESC LIMIT 1"), {"run": run_id, "name": name}).scalar()


CHECK_COLUMNS = ("run_id", "sweep", "workload", "site", "system", "devices", "precision", "metric", "measured",
                 "reference", "ratio", "verdict", "source")


def check(session: Session, sweep: str | None = None) -> list[dict[str, Any]]:
    """Every completed result with a reference, from the ``reference_check`` view."""
    query = f"SELECT {', '.join(CHECK_COLUMNS)} FROM reference_check"
    params: dict[str, Any] = {}
    if sweep:
        query += " WHERE sweep = :sweep"
        params["sweep"] = sweep
    query += " ORDER BY sweep, workload, run_id, metric"
    return [dict(row._mapping) for row in session.execute(text(query), params)]
