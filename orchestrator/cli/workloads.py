"""`orch workloads list|show`: the benchmark programs (workloads/registry.py) and their parameters."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.common import JsonOpt
from orchestrator.cli.output import console, print_json, print_rows, print_table
from orchestrator.errors import UserError

workloads_app = typer.Typer(no_args_is_help=True, help="Benchmark programs: list and show.")


@workloads_app.command("list")
def workloads_list(as_json: JsonOpt = False) -> None:
    """Every workload orch can run."""
    from workloads.registry import WORKLOADS

    rows = [[w.name, w.module, ", ".join(sorted(w.axes)), ", ".join(w.strategies), w.distributed, w.summary]
            for w in WORKLOADS.values()]
    print_rows(["workload", "module", "axes", "strategies", "distributed", "summary"], rows,
               "json" if as_json else "table")


@workloads_app.command("show")
def workloads_show(name: Annotated[str, typer.Argument(help="The workload (orch workloads list).")],
                   as_json: JsonOpt = False) -> None:
    """A workload's parameters, defaults and help."""
    from workloads import registry

    try:
        workload = registry.get(name)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    rows = [[p.name, p.type.__name__, p.default, ", ".join(map(str, p.choices or ())), p.help] for p in workload.params]
    presets = workload.presets() if workload.presets else []
    if as_json:
        print_json({"name": workload.name, "module": workload.module, "summary": workload.summary,
                    "axes": sorted(workload.axes), "strategies": list(workload.strategies),
                    "precisions": list(workload.precisions),
                    "params": [dict(zip(["name", "type", "default", "choices", "help"], r)) for r in rows],
                    "presets": presets})
        return
    console.print(f"[bold]{workload.name}[/bold] ({workload.module}): {workload.summary}")
    print_table(["param", "type", "default", "choices", "help"], rows)
    if presets:  # model sizes: columns are the rows' keys, counts in millions/billions
        from workloads.models.configs import human

        keys = list(presets[0])
        print_table(keys, [[human(v) if k.startswith("params") else v for k, v in r.items()] for r in presets])
