"""`orch references ...` and `orch glossary`: what results are checked against, and what every
column means. Registered on the main app by orchestrator/cli/app.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from orchestrator.cli.common import JsonOpt, SweepOpt, orch_context
from orchestrator.cli.output import console, print_json, print_rows
from orchestrator.errors import UserError

references_app = typer.Typer(no_args_is_help=True, help=(
    "Reference figures (a study's, a vendor's, an earlier sweep's) and the results measured against them: "
    "within, below (a regression: under 95% by default) or above."))


@references_app.command("load")
def references_load(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="YAML (a list of references) or CSV (one per row).")],
    as_json: JsonOpt = False,
) -> None:
    """Load reference figures from a file; one that applies to the same configuration and metric
    as a stored one replaces it.

    Fields: workload and metric (required), value (> 0), source (required: where the figure
    comes from), tolerance (default 0.05: pass at >= 95%), and any of site, system,
    device_model, precision, devices, strategy, batch_size, seq_len, params (left out: any)."""
    from orchestrator.results import references

    specs = references.load_file(file)
    with orch_context(ctx).sessions.begin() as session:
        added, replaced = references.store(session, specs)
    if as_json:
        print_json({"added": added, "replaced": replaced})
    else:
        console.print(f"{added} reference(s) added, {replaced} replaced from {file}")


@references_app.command("from-sweep")
def references_from_sweep(
    ctx: typer.Context,
    sweep: Annotated[str, typer.Argument(help="A sweep whose completed results become the references.")],
    metric: Annotated[Optional[str], typer.Option(help="Metric to take (default: each result's headline "
                                                  "throughput metric, as in the throughput view).")] = None,
    tolerance: Annotated[float, typer.Option(help="Fraction below (or above) the reference still within.")] = 0.05,
    source: Annotated[Optional[str], typer.Option(help="Where the figures come from (default: the sweep).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Take references from an earlier sweep: per configuration, the mean over its repeats."""
    from orchestrator.results import references

    if not 0 <= tolerance < 1:
        raise UserError(f"--tolerance: expected a fraction in [0, 1), got {tolerance}")
    with orch_context(ctx).sessions.begin() as session:
        specs = references.from_sweep(session, sweep, metric, tolerance, source)
        added, replaced = references.store(session, specs)
    if as_json:
        print_json({"added": added, "replaced": replaced})
    else:
        console.print(f"{added} reference(s) added, {replaced} replaced from sweep {sweep}")


@references_app.command("list")
def references_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """The stored reference figures."""
    from orchestrator.results.queries import REFERENCE_COLUMNS, reference_rows

    rows = [[row[column] for column in REFERENCE_COLUMNS] for row in reference_rows(orch_context(ctx).sessions)]
    print_rows(REFERENCE_COLUMNS, rows, "json" if as_json else "table")


@references_app.command("check")
def references_check(
    ctx: typer.Context,
    sweep: SweepOpt = None,
    fail: Annotated[bool, typer.Option("--fail", help="Exit 1 when any result is below its reference "
                                       "(for CI jobs).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Every completed result that has a reference: measured, reference, ratio and verdict
    (below / within / above). The same rows as the reference_check view."""
    from orchestrator.results import references

    with orch_context(ctx).sessions() as session:
        rows = references.check(session, sweep)
    columns = list(references.CHECK_COLUMNS)
    print_rows(columns, [[row[c] for c in columns] for row in rows], "json" if as_json else "table")
    below = sum(1 for row in rows if row["verdict"] == "below")
    if not as_json:
        console.print(f"{len(rows)} result(s) checked: {below} below, "
                      f"{sum(1 for r in rows if r['verdict'] == 'within')} within, "
                      f"{sum(1 for r in rows if r['verdict'] == 'above')} above")
    if fail and below:
        raise typer.Exit(1)


def glossary(
    name: Annotated[Optional[str],
                    typer.Argument(help="A view (results, scaling, cost, ...) or a column name.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """What every column of every view means: formula, unit, and the study that uses it
    (db/glossary.yaml)."""
    from orchestrator.results import glossary as terms

    entries = terms.lookup(name)
    if not entries:
        raise UserError(f"no view or column named {name!r} in the glossary (views: {', '.join(terms.views())})")
    columns = ["view", "column", "unit", "formula", "studies"]
    rows = [[e["view"], e["column"], e.get("unit", ""), e.get("formula", ""), ", ".join(e.get("studies", []))]
            for e in entries]
    print_rows(columns, rows, "json" if as_json else "table")
