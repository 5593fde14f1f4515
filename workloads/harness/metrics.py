"""The metrics file (schema ``orch.metrics/1``) and its atomic write.

Kept in step with ``orchestrator/results/metrics_schema.py`` by the tests; written
without importing it, since workloads never import ``orchestrator``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA = "orch.metrics/1"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def clean_number(value: Any) -> float | None:
    """Finite non-negative float, else None (the schema rejects NaN, inf and negatives)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return number


def clean_metrics(metrics: dict[str, Any]) -> dict[str, float | None]:
    return {str(name): clean_number(value) for name, value in metrics.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def write_atomic(path: str | os.PathLike[str], document: dict[str, Any]) -> Path:
    """Write JSON to a temporary file beside ``path`` then rename: readers see all or nothing."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(_jsonable(document), handle, indent=2, sort_keys=False, allow_nan=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return target


def document(
    *,
    workload: str,
    params: dict[str, Any],
    precision: str,
    world_size: int,
    device: dict[str, Any],
    metrics: dict[str, Any],
    warmup_steps: int,
    step_times_s: list[float],
    env: dict[str, Any],
    started_at: str,
    finished_at: str,
    timing_extra: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    timing: dict[str, Any] = {
        "warmup_steps": int(warmup_steps),
        "timed_steps": max(1, len(step_times_s)),
        "step_times_s": [float(t) for t in step_times_s],
    }
    timing.update(timing_extra or {})
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "workload": workload,
        "status": "ok",
        "params": params,
        "precision": precision,
        "world_size": int(world_size),
        "device": device,
        "metrics": clean_metrics(metrics),
        "timing": timing,
        "env": env,
        "started_at": started_at,
        "finished_at": finished_at,
    }
    doc.update(extra or {})
    return doc
