"""The table `orch plan` prints by default: one line per run, every swept axis a column.

The full row (17 columns: tracing source, node count, queue, tier, ...) made every column four
characters wide on a 120-column terminal and folded params into twelve-line cells (issue 27).
Here a run is one line: what identifies it (experiment, workload, site, devices, precision),
one column per parameter the plan varies (and only those), the predictions, and its status;
a skip reason is a numbered note under the table, where it can be as long as it is. Cells are
never folded: a terminal too narrow for a column shortens it with an ellipsis. ``--wide``
prints every column; ``--json`` and ``--all`` carry everything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table
from rich.text import Text

from orchestrator.cli.output import console, fmt, sig3
from orchestrator.escape import one_line

if TYPE_CHECKING:
    from orchestrator.plan.record import PlannedRun

# Parameters the harness sets on every run: the same for all, never what a sweep compares.
HARNESS = ("warmup", "iters")
RUN_AXES = ("strategy", "batch_size", "seq_len", "repeat")


def _axes_of(plan: "PlannedRun") -> dict[str, Any]:
    values = {k: v for k, v in plan.spec.param_dict.items() if k not in HARNESS}
    for axis in RUN_AXES:
        value = getattr(plan.spec, axis)
        if value is not None and not (axis == "repeat" and value == 0):
            values[axis] = value
    return values


def swept_axes(plans: list["PlannedRun"]) -> list[str]:
    """Every parameter whose value is not the same in all runs (absent counts as a value), in
    the order the runs name them."""
    seen: dict[str, set[str]] = {}
    order: list[str] = []
    for plan in plans:
        for name, value in _axes_of(plan).items():
            if name not in seen:
                seen[name], order = set(), order + [name]
            seen[name].add(repr(value))
    return [name for name in order if len(seen[name]) > 1 or any(name not in _axes_of(p) for p in plans)]


IDENTITY = ("experiment", "workload", "site", "dev", "precision")
OPTIONAL = ("run_s", "step_s", "mem_gb")  # left out, in this order, when the screen is too narrow


def print_plan_table(plans: list["PlannedRun"], title: str) -> None:
    axes = swept_axes(plans)
    notes: dict[str, int] = {}
    cells: dict[str, list[str]] = {name: [] for name in ("run_id", *IDENTITY, *axes, *OPTIONAL[::-1], "status")}
    for plan in plans:
        spec, resolved = plan.spec, plan.resolved
        values = _axes_of(plan)
        status = str(plan.recorded or plan.status)
        if resolved.skip_reason:
            status += f" [{notes.setdefault(resolved.skip_reason, len(notes) + 1)}]"
        row: dict[str, Any] = {
            "run_id": spec.id, "experiment": spec.experiment, "workload": spec.workload,
            "site": spec.site + (f":{spec.system}" if spec.system else ""), "dev": spec.devices,
            "precision": spec.precision, **{axis: values.get(axis) for axis in axes},
            "mem_gb": sig3(resolved.predicted_peak_gb),
            "step_s": sig3(resolved.predicted_step_s), "run_s": sig3(resolved.predicted_run_s), "status": status}
        for name in cells:
            cells[name].append(one_line(fmt(row[name])))
    # What every run shares is said once, in the title, not in a column of repeats.
    shared = [name for name in IDENTITY if len(set(cells[name])) == 1 and len(plans) > 1]
    title += "".join(f", {name} {cells[name][0]}" for name in shared)
    columns = [name for name in cells if name not in shared]
    left_out: list[str] = []

    def width(names: list[str]) -> int:  # each column, its padding and the separator between columns
        return sum(max(len(name), *(len(c) for c in cells[name])) + 1 for name in names) + len(names) - 1

    for name in OPTIONAL:
        if width(columns) <= console.width:
            break
        columns.remove(name)
        left_out.append(name)
    # Two spaces between columns: the box's blank separator and one of padding on the right.
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    for name in columns:
        table.add_column(name, no_wrap=True, overflow="ellipsis",
                         justify="right" if name in ("dev", *OPTIONAL) else "left",
                         min_width=16 if name == "run_id" else None)
    for index in range(len(plans)):
        table.add_row(*(Text(cells[name][index]) for name in columns))
    console.print(table)
    if left_out:
        console.print(f"(left out for the screen's width: {', '.join(left_out)}; --wide or --json has them)",
                      markup=False, highlight=False, soft_wrap=True)
    for reason, number in notes.items():
        count = sum(1 for p in plans if p.resolved.skip_reason == reason)
        console.print(Text(one_line(f"[{number}] {reason}") + (f" ({count} runs)" if count > 1 else "")),
                      soft_wrap=True)
