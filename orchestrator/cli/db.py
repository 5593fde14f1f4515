"""`orch db upgrade|rebuild-results|url`: the results database itself (orchestrator/results/db/)."""

from __future__ import annotations

import typer

from orchestrator.cli.common import JsonOpt, orch_context
from orchestrator.cli.output import console, err_console, print_json
from orchestrator.errors import UserError

db_app = typer.Typer(no_args_is_help=True, help="The results database.")


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply the database migrations (safe to repeat)."""
    from orchestrator.results.db.engine import current_revision, make_engine, redact, upgrade

    c = orch_context(ctx)
    engine = make_engine(c.db_url)
    try:
        before = current_revision(engine)
        upgrade(engine)  # one transaction: a migration that fails leaves the database as it was
        # A view dropped by hand (`orch sql --write "DROP VIEW results"`) comes back: the views
        # are re-created from the newest migration's SQL when any is missing.
        from orchestrator.results.db.views import missing_views, recreate_views

        with engine.begin() as connection:
            restored = recreate_views(connection) if missing_views(connection) else []
    except Exception as exc:  # connection refused, a schema edited by hand, ...
        raise UserError(f"cannot upgrade {redact(c.db_url)}: {str(exc).splitlines()[0]}") from None
    console.print(f"{redact(c.db_url)}: {before or 'empty'} -> {current_revision(engine)}"
                  + (f"; views re-created: {', '.join(restored)}" if restored else ""))


@db_app.command("rebuild-results")
def db_rebuild_results(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Write the [bold]results[/bold] rows again from runs, attempts and metrics (safe to repeat).

    For a results table emptied or edited by hand; one transaction, so an interrupted rebuild
    changes nothing."""
    from rich.progress import Progress

    from orchestrator.results.db.rebuild import rebuild_results

    c = orch_context(ctx)
    with Progress(console=err_console, disable=as_json, transient=True) as bar:
        task = bar.add_task("result rows", total=None)
        count = rebuild_results(c.sessions, lambda done, total: bar.update(task, completed=done, total=total))
    if as_json:
        print_json({"attempts": count})
    else:
        console.print(f"results rebuilt: {count} row(s) from the ended attempts")


@db_app.command("url")
def db_url(ctx: typer.Context) -> None:
    """The database orch would use here (password hidden)."""
    from orchestrator.results.db.engine import redact

    console.print(redact(orch_context(ctx).db_url))
