"""`orch sites list|show|check|rehearsal|probe`: the site profiles, checked against their twins.

Profiles are orchestrator/sites/, the checks and rehearsals orchestrator/run/sitecheck.py, the probe
orchestrator/cli/probe.py (its command is registered here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import JsonOpt, orch_context
from orchestrator.cli.output import console, err_console, print_json, print_rows, print_table
from orchestrator.cli.probe import probe_status, sites_probe
from orchestrator.errors import UserError
from orchestrator.escape import printable

sites_app = typer.Typer(no_args_is_help=True, help="Site profiles: list, show, check against a twin.")


@sites_app.command("list")
def sites_list(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every site profile on the search path."""
    from orchestrator.sites.profiles import available_sites, find_site_file, load_site

    c = orch_context(ctx)
    rows = []
    broken: list[UserError] = []
    for name in available_sites(c.sites_dirs):
        try:
            profile = load_site(name, c.sites_dirs)
        except UserError as exc:  # one bad profile in --sites-dir is its own error, not every site's
            broken.append(exc)
            continue
        rows.append([name, profile.scheduler, profile.device.model, profile.device.per_node, profile.max_nodes,
                     ", ".join(q.label for q in profile.queues), ", ".join(profile.systems),
                     str(find_site_file(name, c.sites_dirs))])
    columns = ["site", "scheduler", "device", "devices_per_node", "max_nodes", "queues", "systems", "file"]
    print_rows(columns, rows, "json" if as_json else "table")
    for problem in broken:
        err_console.print(printable(f"error: {problem}"), markup=False, highlight=False, soft_wrap=True)
    if broken:
        raise typer.Exit(2)


@sites_app.command("show")
def sites_show(ctx: typer.Context, site: Annotated[str, typer.Argument(help="site or site:system")],
               as_json: JsonOpt = False) -> None:
    """One site's profile, validated, and the latest probe of this version of it (`orch sites probe`;
    JSON: "probe", null when none).

    The profile is printed as its file is written, with the comments that cite each fact's source;
    with [bold]site:system[/bold] (or [bold]--json[/bold]) the values as they apply, the system's
    overrides merged in."""
    from orchestrator.sites.profiles import load_site

    profile = load_site(site, orch_context(ctx).sites_dirs)
    data = profile.model_dump(mode="json")
    probe, probe_line = probe_status(orch_context(ctx), site)
    if as_json:
        print_json({**data, "probe": probe})
        return
    source = profile.source
    if ":" not in site and source is not None:  # the file as written: its sources are its comments
        from orchestrator.yamlsource import read_source

        console.print(printable(f"# {source.path}"), markup=False, highlight=False, soft_wrap=True)
        console.print(printable(read_source(source.path).rstrip("\n")), markup=False, highlight=False,
                      soft_wrap=True)
    else:
        import yaml

        where = f" (the file, with each value's source: {source.path})" if source is not None else ""
        console.print(printable(f"# {site}: the values as they apply{where}"), markup=False, highlight=False,
                      soft_wrap=True)
        console.print(printable(yaml.safe_dump(data, sort_keys=False)), markup=False, highlight=False, soft_wrap=True)
    console.print(probe_line, markup=False, highlight=False, soft_wrap=True)


@sites_app.command("check")
def sites_check(
    ctx: typer.Context,
    site: Annotated[str, typer.Argument(help="site (every Slurm system of it) or site:system")],
    no_up: Annotated[bool, typer.Option(
        "--no-up", help="Do not bring the twin up; fail unless the sandbox already is this site's twin.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Validate the site's representative scripts with [bold]sbatch --test-only[/bold] on its twin.

    Renders 1 device, 1 node, 2 nodes and the largest queue at its limits through the normal plan
    path, and has the sandbox, configured as the site's twin, judge each script. The twin is brought
    up as by [bold]orch sandbox up --like SITE[/bold] (root; idempotent) and stays up afterwards;
    [bold]orch sandbox up[/bold] restores the plain sandbox. Exit 1 when any script is rejected,
    2 when the site has no Slurm system (PBS: emulator only; appliances).
    """
    import os

    from orchestrator.run.sitecheck import check_site

    c = orch_context(ctx)
    report = check_site(site, os.environ, c.sites_dirs, bring_up=not no_up,
                        workdir=c.state_dir / "sitecheck" / site.replace(":", "+"))
    if as_json:
        print_json(report.as_dict())
    else:
        rows = [[r.target, r.shape, r.devices, r.nodes, r.queue, r.result,
                 r.detail + "".join(f" [{n}]" for n in r.notes)] for r in report.rows]
        print_table(["target", "shape", "devices", "nodes", "queue", "result", "detail"], rows,
                    title=f"{site} against " + (f"its twin (sandbox up --like {report.twin})" if report.twin
                                                else "no twin"))
        for note in report.twin_notes:
            console.print(f"twin: {note}", markup=False, highlight=False)
        if report.workdir:
            console.print(f"scripts checked: {report.workdir}", markup=False, highlight=False)
        checked, rejected = len(report.checked), len(report.rejected)
        console.print(f"{checked - rejected} of {checked} script(s) accepted" if checked else
                      "nothing could be checked here")
    if report.exit_code:
        raise typer.Exit(report.exit_code)


@sites_app.command("rehearsal")
def sites_rehearsal(
    ctx: typer.Context,
    site: Annotated[str, typer.Argument(help="site (its Slurm systems are kept; a PBS site runs through a PBS "
                                              "server here or orch's PBS emulator)")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory to write <site>.yaml into.")],
    as_json: JsonOpt = False,
) -> None:
    """Write a copy of SITE's profile for a rehearsal on its twin: the site's directives, this machine's CPU.

    Then: [bold]orch sandbox up --like SITE[/bold] and [bold]orch --sites-dir OUTPUT run SWEEP[/bold].
    A PBS site (no twin): [bold]source OUTPUT/pbs-env.sh[/bold] (the emulator, when no PBS server is here),
    then the same run; the command says what that proves and what it does not.
    """
    from orchestrator.run.sitecheck import (
        pbs_rehearsal_setup,
        rehearsal_folder,
        rehearsal_profile,
        with_pbs_commands_dir,
        write_rehearsal_profile,
    )

    filename, text, changes = rehearsal_profile(site, orch_context(ctx).sites_dirs)
    rehearsal_folder(output)
    path = output / filename
    notes: list[str] = []
    if "\nscheduler: pbs\n" in text:
        # PBS: no twin; the emulator, named by absolute path in the profile (and what that proves, plainly).
        notes, commands_dir = pbs_rehearsal_setup(output)
        if commands_dir is not None:
            text = with_pbs_commands_dir(text, commands_dir)
    write_rehearsal_profile(path, text)
    if as_json:
        print_json({"path": str(path), "changes": changes, "notes": notes})
        return
    console.print(f"wrote {path}", markup=False, highlight=False)
    for change in changes:
        console.print(f"  {change}", markup=False, highlight=False)
    for note in notes:
        console.print(note, markup=False, highlight=False)


sites_app.command("probe")(sites_probe)  # orchestrator/cli/probe.py
