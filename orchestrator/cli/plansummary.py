"""What `orch plan` prints for a plan too large to read as one table.

A campaign plans tens of thousands of runs; a table row per run is pages of text that no
one reads (and rich takes tens of seconds to draw it). Above ``SUMMARY_ABOVE`` runs the
plan prints, on one screen: the runs by site and status, the skipped ones by reason, the
first few rows, and how to see the rest (``--all``: every run as plain aligned text, in a
pager on a terminal; ``--json``; ``--show``).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

from orchestrator.cli.output import fmt

if TYPE_CHECKING:
    from orchestrator.plan.record import PlannedRun

SUMMARY_ABOVE = 50  # runs: more than this and `orch plan` prints a summary, not every row
FIRST_ROWS = 8
MAX_SITES = 10
MAX_REASONS = 8

# Numbers in a skip reason ("predicted to need 45.3 GB", "8 devices requested") vary from run
# to run; reasons that differ only in them are counted together. Numbers inside a word (the
# model A100-SXM4-40GB) are part of the reason.
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")


def reason_kind(reason: str) -> str:
    return _NUMBER.sub("#", reason)


def listing(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The rows as plain text lines, columns aligned, a header first (fast for any count)."""
    cells = [list(columns)] + [[fmt(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    # Columns of numbers are right-aligned (and their headers with them).
    numeric = [bool(rows) and all(type(row[i]) in (int, float) or row[i] is None for row in rows)
               for i in range(len(columns))]
    return ["  ".join(cell.rjust(width) if right else cell.ljust(width)
                      for cell, width, right in zip(row, widths, numeric)).rstrip() for row in cells]


def summary(plans: list[PlannedRun], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The summary's lines (at most about 40, whatever the number of runs)."""
    by_site: dict[str, Counter[str]] = {}
    for plan in plans:
        spec = plan.spec
        target = f"{spec.site}:{spec.system}" if spec.system else spec.site
        counts = by_site.setdefault(target, Counter())
        counts["runs"] += 1
        counts["skipped" if plan.resolved.skipped else "runnable"] += 1
        counts["new"] += plan.new
    site_rows: list[list[Any]] = [[target, c["runs"], c["runnable"], c["skipped"], c["new"]]
                 for target, c in sorted(by_site.items(), key=lambda item: (-item[1]["runs"], item[0]))]
    lines = listing(["site", "runs", "runnable", "skipped", "new"], site_rows[:MAX_SITES])
    if len(site_rows) > MAX_SITES:
        rest = site_rows[MAX_SITES:]
        lines.append(f"... {len(rest)} more site(s) with {sum(int(r[1]) for r in rest)} run(s)")

    kinds: dict[str, list[Any]] = {}  # kind -> [count, first reason, distinct reasons]
    for plan in plans:
        reason = plan.resolved.skip_reason
        if reason is None:
            continue
        entry = kinds.setdefault(reason_kind(reason), [0, reason, set()])
        entry[0] += 1
        entry[2].add(reason)
    if kinds:
        ordered = sorted(kinds.values(), key=lambda entry: -entry[0])
        skipped = sum(entry[0] for entry in ordered)
        lines += ["", f"skipped, by reason ({skipped} run(s)):"]
        width = len(str(ordered[0][0]))
        for count, first, distinct in ordered[:MAX_REASONS]:
            alike = f" (and {len(distinct) - 1} more like it)" if len(distinct) > 1 else ""
            lines.append(f"  {count:>{width}}  {first}{alike}")
        if len(ordered) > MAX_REASONS:
            rest = ordered[MAX_REASONS:]
            lines.append(f"  ... {sum(entry[0] for entry in rest)} run(s) for {len(rest)} other reason(s)")

    lines += ["", f"first {min(FIRST_ROWS, len(rows))} of {len(rows)} runs:"]
    lines += listing(columns, rows[:FIRST_ROWS])
    lines += ["", "every run: --all (a pager on a terminal), --json (for scripts), --show (with each script)"]
    return lines
