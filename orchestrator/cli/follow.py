"""`orch follow start|stop|status`: following a campaign that survives logout.

Registered on the main app by orchestrator/cli/app.py; the process handling is
orchestrator/run/detach.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator import paths
from orchestrator.cli.common import MAX_INTERVAL_S, JsonOpt, SiteOpt, SweepOpt, orch_context
from orchestrator.cli.output import console, print_json
from orchestrator.errors import UserError

follow_app = typer.Typer(no_args_is_help=True, help=(
    "Follow a campaign in the background, past logout: [bold]orch follow start[/bold] runs `orch status "
    "--watch` detached (its own session, a pid file and a log under .orch/), until no run is active. Where "
    "login-node processes are not allowed to live, poll from the scheduler instead: a `scrontab` line "
    "running `orch status` (one poll) every few minutes (README: your first campaign on a real cluster)."))


def _describe(follower: Any, alive: bool) -> dict[str, Any]:
    return {"running": alive, "pid": follower.pid, "since": follower.started_at, "log": follower.log,
            "command": "orch " + " ".join(follower.args)}


@follow_app.command("start")
def follow_start(
    ctx: typer.Context,
    sweep: SweepOpt = None,
    site: SiteOpt = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls (each asks every "
                                            "site's scheduler once: be kind to a shared controller).")] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Start following in the background: polls, collects metrics and retries by policy, as `orch status
    --watch` does, in a process that outlives the terminal. It ends when no run is active."""
    from orchestrator.run import detach

    c = orch_context(ctx)
    if not 1 <= interval <= MAX_INTERVAL_S:  # nan compares False with everything
        raise UserError(f"--interval {interval}: expected at least 1 second between polls, "
                        f"at most {MAX_INTERVAL_S:,} (a day)")
    args = ["status", "--watch", "--interval", str(interval)]
    args += [a for opt, value in (("--sweep", sweep), ("--site", site)) if value for a in (opt, value)]
    args = [a for d in c.sites_dirs for a in ("--sites-dir", str(Path(d).resolve()))] + args
    # The database URL may hold a password: it travels in the follower's environment (readable by
    # its owner only), never on its command line (`ps`) or in the pid file or log.
    env = {**os.environ, paths.DB_URL_ENV: c.db_url, paths.HOME_ENV: str(c.state_dir.resolve())}
    try:
        follower = detach.start(c.state_dir, args, env, Path.cwd())
    except RuntimeError as exc:
        raise UserError(str(exc)) from None
    if as_json:
        print_json(_describe(follower, True))
        return
    console.print(f"following in the background: pid {follower.pid}, log {follower.log}\n"
                  "`orch follow status` shows it, `orch follow stop` ends it; it ends by itself when no run "
                  "is active.", markup=False)


@follow_app.command("stop")
def follow_stop(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Stop the background follower (a poll cut short loses nothing: the next one picks up)."""
    from orchestrator.run import detach

    c = orch_context(ctx)
    try:
        follower = detach.stop(c.state_dir)
    except detach.BadPidFile as exc:
        raise UserError(f"{exc}: no process was signalled (remove the file if no follower runs)") from None
    if as_json:
        print_json({"stopped": follower.pid if follower else None})
    elif follower is None:
        console.print("no follower is running")
    else:
        console.print(f"stopped the follower (pid {follower.pid})")


@follow_app.command("status")
def follow_status(
    ctx: typer.Context,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines of its log to show.")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Whether a background follower is running, since when, and the end of its log."""
    from orchestrator.run import detach

    c = orch_context(ctx)
    try:
        follower = detach.read(c.state_dir)
    except detach.BadPidFile as exc:
        raise UserError(str(exc)) from None
    alive = follower is not None and detach.is_alive(follower)
    tail = detach.log_tail(c.state_dir, lines)
    if as_json:
        print_json({**(_describe(follower, alive) if follower else {"running": False}), "log_tail": tail})
        return
    if follower is None:
        console.print("no follower has been started here (`orch follow start`)")
    elif alive:
        console.print(f"running: pid {follower.pid} since {follower.started_at} ({' '.join(follower.args)})",
                      markup=False)
    else:
        console.print(f"not running (pid {follower.pid}, started {follower.started_at}, has ended)", markup=False)
    for line in tail:
        console.print(f"  {line}", markup=False, highlight=False)
