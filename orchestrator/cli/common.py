"""What every command module shares: the ``--json`` option and orch's context.

The command groups (results, predict, probe, follow) live in their own modules and are registered
on the main app by orchestrator/cli/app.py; they read the context the main app's callback made
from the root of typer's context instead of importing app.py (which imports them: a cycle).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def orch_context(ctx: typer.Context) -> Any:
    """orch's Context (database URL, sites directories, state directory), set by the main app's callback."""
    return ctx.find_root().obj
