"""`orch sandbox up|down|status`: the Slurm cluster on this machine (orchestrator/sites/sandbox/)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from orchestrator.cli.common import JsonOpt, orch_context
from orchestrator.cli.output import console, print_json, print_table

sandbox_app = typer.Typer(no_args_is_help=True, help="A real Slurm cluster on this machine (needs root).")


@sandbox_app.command("up")
def sandbox_up(
    ctx: typer.Context,
    like: Annotated[Optional[str], typer.Option(
        "--like", help="Configure as a twin of this site: its partitions and limits, gres, node sizes, accounts "
                       "and QoS (from the environment variables its profile names), with enforcement on.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Switch to a twin even while jobs are queued or running.")]
    = False,
    as_json: JsonOpt = False,
) -> None:
    """Bring up (idempotently) a Slurm cluster here: slurmctld, 4 slurmd nodes with gres gpu:4, slurmdbd.

    With [bold]--like SITE[/bold] the same cluster becomes a twin of SITE (every Slurm system of it);
    without it the plain sandbox (partitions debug and batch, no enforcement) is restored.
    """
    import os

    from orchestrator.sites import sandbox

    _print_sandbox(sandbox.up(like=like, env=os.environ, force=force, sites_dirs=orch_context(ctx).sites_dirs), as_json)


@sandbox_app.command("down")
def sandbox_down() -> None:
    """Stop the sandbox cluster's daemons."""
    from orchestrator.sites import sandbox

    sandbox.down()
    console.print("sandbox stopped")


@sandbox_app.command("status")
def sandbox_status(as_json: JsonOpt = False) -> None:
    """What of the sandbox cluster is running, and which site it is a twin of (twin; none: plain)."""
    from orchestrator.sites import sandbox

    _print_sandbox(sandbox.status(), as_json)


def _print_sandbox(state: object, as_json: bool) -> None:
    from dataclasses import asdict, is_dataclass

    data = asdict(state) if is_dataclass(state) and not isinstance(state, type) else {"status": str(state)}
    data.pop("expected_nodes", None)
    if as_json:
        print_json(data)
    else:
        if "twin" in data and not data["twin"]:
            data["twin"] = "none (the plain sandbox)"
        print_table(["what", "state"], [[k, json.dumps(v, default=str) if isinstance(v, (list, dict)) else v]
                                        for k, v in data.items()])
