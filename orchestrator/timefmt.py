"""Walltimes: parsed from sweep/profile text, written in scheduler formats."""

from __future__ import annotations

import re

_CLOCK = re.compile(r"^(?:(\d+)-)?(\d+):(\d{1,2}):(\d{1,2})$")
# No batch queue runs a job for a year; a larger walltime, written as a 20-digit number of
# minutes, overflowed the database's 64-bit column at `orch plan` (after `--dry-run` passed).
MAX_WALLTIME_S = 366 * 24 * 3600


def parse_walltime(value: str | int) -> int:
    """Seconds in ``value``: ``HH:MM:SS``, ``D-HH:MM:SS``, or an integer number of minutes."""
    if isinstance(value, bool):
        raise ValueError("expected a walltime like '01:30:00' or minutes as an integer")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("walltime must be positive")
        if value * 60 > MAX_WALLTIME_S:
            raise ValueError(f"walltime {value} minutes is more than a year: expected at most {MAX_WALLTIME_S // 60}")
        return value * 60
    match = _CLOCK.match(str(value).strip())
    if not match:
        raise ValueError(f"expected a walltime like '01:30:00' or '2-00:00:00', got {value!r}")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    if minutes >= 60 or seconds >= 60:
        raise ValueError(f"minutes and seconds must be below 60 in {value!r}")
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total <= 0:
        raise ValueError("walltime must be positive")
    if total > MAX_WALLTIME_S:
        raise ValueError(f"walltime {value!r} is more than a year (at most 366-00:00:00)")
    return total


def format_hms(seconds: int) -> str:
    """``HH:MM:SS`` (hours may exceed 24), as PBS and Slurm both accept."""
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def format_duration(seconds: float) -> str:
    """A duration for people: ``2h20m`` from an hour up, ``12m05s`` from a minute, else ``40s``
    (whole units, rounded down)."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
