"""`orch sites probe`, the probe line of `orch sites show` and the probe warnings of `orch plan`.

Registered on the main app by orchestrator/cli/app.py; the probe itself is orchestrator/run/probe.py.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from orchestrator.cli.common import JsonOpt, orch_context
from orchestrator.cli.output import console, err_console, print_json, print_table
from orchestrator.errors import UserError

if TYPE_CHECKING:
    from orchestrator.plan.record import PlannedRun
    from orchestrator.results.db.models import SiteProbe
    from orchestrator.run.executors.base import JobInfo

DEFAULT_TIMEOUT_S = 900.0


class _Progress:
    """The wait, on stderr: a live line on a terminal, one line per change of state otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.status = None if quiet or not err_console.is_terminal else err_console.status("probe: submitted")
        self.said: dict[int, str] = {}

    def __enter__(self) -> "_Progress":
        if self.status is not None:
            self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is not None:
            self.status.stop()

    def __call__(self, probe: "SiteProbe", info: "JobInfo | None", elapsed: float) -> None:
        target = f"{probe.site}:{probe.system}" if probe.system else probe.site
        state = info.state.value if info is not None else "not yet known to the scheduler"
        line = f"probe #{probe.id} of {target}: job {probe.job_id} {state}"
        if self.status is not None:
            self.status.update(f"{line} ({elapsed:.0f} s)")
        elif not self.quiet and self.said.get(probe.id) != state:
            err_console.print(line, markup=False, highlight=False)
        self.said[probe.id] = state


def _target(probe: "SiteProbe") -> str:
    return f"{probe.site}:{probe.system}" if probe.system else probe.site


def _print_probe(probe: "SiteProbe") -> None:
    """The checks as a table, then what failed and what to fix (stderr)."""
    checks = json.loads(probe.checks or "[]")
    verdict = "passed" if probe.passed else "FAILED"
    rows = [[c["name"], "ok" if c["ok"] else "FAILED", c["value"], c["detail"]] for c in checks]
    print_table(["check", "result", "value", "detail"], rows,
                title=f"probe #{probe.id} of {_target(probe)}: {verdict} (job {probe.job_id or '-'})")
    console.print(f"profile {probe.profile_path} (sha256 {probe.profile_hash[:12]}); run directory {probe.run_dir}",
                  markup=False, highlight=False, soft_wrap=True)
    failed = [c["name"] for c in checks if not c["ok"]]
    if failed:
        err_console.print(f"probe #{probe.id} of {_target(probe)} FAILED: {', '.join(failed)}", markup=False,
                          highlight=False, soft_wrap=True)
    for check in checks:
        if not check["ok"] and check["fix"]:
            err_console.print(f"{check['name']} failed: {check['detail']}\n  fix: {check['fix']}",
                              markup=False, highlight=False, soft_wrap=True)


def sites_probe(
    ctx: typer.Context,
    site: Annotated[Optional[str], typer.Argument(
        help="site or site:system (with --collect: optional, every probe waiting to be judged)")] = None,
    nodes: Annotated[int, typer.Option(
        "--nodes", help="1: two ranks on one node; 2: every device of two nodes, so the all-reduce crosses "
                        "the network (where the profile's max_nodes allows)")] = 1,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds to wait for the job, queue time included; past them the job stays queued "
                          "and --collect judges it later (exit 1 meanwhile).")] = DEFAULT_TIMEOUT_S,
    no_wait: Annotated[bool, typer.Option(
        "--no-wait", help="Submit and return; `orch sites probe [SITE] --collect` waits for it and judges it.")]
    = False,
    collect: Annotated[bool, typer.Option(
        "--collect", help="Wait for and judge the probes submitted earlier (--no-wait, or a wait that timed "
                          "out) instead of submitting one.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit one short job to SITE that proves what a campaign there depends on, and judge it.

    The job is rendered from the site's own profile (setup lines, environment, launcher, Python) and
    submitted through its scheduler like any run. It reports the compute node's Python, torch and
    DeepSpeed versions, the devices it sees, a two-rank all-reduce on the device's backend (gloo,
    nccl, xccl/ccl, hccl) with its bus bandwidth (two nodes with --nodes 2), whether it sees the run
    directory orch wrote on this node (a marker with a random token), $LOADEDMODULES and the hosts.

    The verdict is stored in the site_probes table with the profile's sha256: `orch sites show SITE`
    shows the latest, and `orch plan` warns for every site whose current profile has no passing probe
    (not for the embedded local site). Waits with a progress line; exit 1 when a check failed (each
    named, with what to fix) or the wait timed out, 2 when the profile cannot run the probe at all.
    A probe is not a run of a sweep: `orch status` does not follow it, `--collect` does.
    """
    from orchestrator.run.probe import follow_probes, load_probes, pending_probes, probe_row, submit_probe

    c = orch_context(ctx)
    if not collect and site is None:
        raise UserError("name the site to probe (orch sites probe SITE), or --collect the probes waiting")
    if collect and no_wait:
        raise UserError("--collect waits for the probes: it cannot be given with --no-wait")
    if collect:
        waiting = pending_probes(c.sessions, site)
        if not waiting:
            message = f"no probe{' of ' + site if site else ''} is waiting to be collected"
            if as_json:
                print_json({"passed": True, "probes": [], "waiting": []})
            else:
                console.print(message, markup=False, highlight=False)
            return
        ids = [p.id for p in waiting]
    else:
        assert site is not None
        submitted = submit_probe(c.sessions, c.executors(), c.state_dir, site, c.sites_dirs, os.environ, nodes)
        ids = [submitted.probe_id]
        if no_wait or submitted.job_id is None:
            probes = load_probes(c.sessions, ids)
            if no_wait and submitted.job_id is not None:
                if as_json:
                    print_json({"passed": None, "probes": [probe_row(p) for p in probes], "waiting": ids})
                else:
                    console.print(f"probe #{submitted.probe_id} of {site} submitted: job {submitted.job_id}; "
                                  f"`orch sites probe {site} --collect` judges it", markup=False, highlight=False)
                return
            _finish(probes, [], as_json)
            return
    executors = c.executors()
    started = time.monotonic()
    try:
        with _Progress(quiet=as_json) as progress:
            still = follow_probes(c.sessions, executors, pending_probes(c.sessions, ids=ids), timeout, progress)
    except KeyboardInterrupt:
        named = f" {site}" if site else ""
        err_console.print(f"interrupted: the probe's job stays with its scheduler; `orch sites probe{named} "
                          "--collect` judges it", markup=False, highlight=False)
        raise typer.Exit(130) from None
    probes = load_probes(c.sessions, ids)
    if still and not as_json:
        for probe in probes:
            if probe.id in still:
                err_console.print(f"probe #{probe.id} of {_target(probe)}: job {probe.job_id} has not ended after "
                                  f"{time.monotonic() - started:.0f} s; it stays queued: `orch sites probe "
                                  f"{_target(probe)} --collect` judges it once it ran", markup=False, highlight=False,
                                  soft_wrap=True)
    _finish(probes, still, as_json)


def _finish(probes: list["SiteProbe"], still: list[int], as_json: bool) -> None:
    from orchestrator.run.probe import probe_row

    done = [p for p in probes if p.id not in still]
    passed = bool(done) and not still and all(p.passed for p in done)
    if as_json:
        print_json({"passed": passed, "probes": [probe_row(p) for p in probes], "waiting": still})
    else:
        for probe in done:
            _print_probe(probe)
    if not passed:
        raise typer.Exit(1)


def probe_status(c: Any, target: str) -> tuple[dict[str, Any] | None, str]:
    """The latest finished probe of ``target``'s current profile (JSON), and one line about it."""
    from orchestrator.results.probes import database_exists, latest_probe
    from orchestrator.run.probe import probe_row
    from orchestrator.sites.fingerprint import fingerprint

    none = f"probe: no probe for this profile; run `orch sites probe {target}`"
    if not database_exists(c.db_url):
        return None, none
    fp = fingerprint(target, c.sites_dirs)
    with c.sessions() as session:
        probe = latest_probe(session, fp)
    if probe is None:
        return None, none
    row = probe_row(probe)
    when = probe.finished_at.strftime("%Y-%m-%d %H:%M") if probe.finished_at else "?"
    if not probe.passed:
        return row, (f"probe: #{probe.id} FAILED at {when} (job {probe.job_id or '-'}): {probe.failed_checks}; "
                     f"`orch sites probe {target}` again once fixed")
    gbs = f"{probe.allreduce_gbs:.3g} GB/s" if probe.allreduce_gbs is not None else "-"
    return row, (f"probe: #{probe.id} passed at {when} (job {probe.job_id}): python {probe.python}, torch "
                 f"{probe.torch}, deepspeed {probe.deepspeed}, devices {probe.devices}, all-reduce {gbs} "
                 f"({probe.allreduce_backend}, {probe.ranks_requested} ranks, {probe.nodes} node(s)), "
                 f"run dir visible, modules: {probe.modules or 'none'}, hosts: {probe.hostnames}")


def plan_warnings(c: Any, plans: list["PlannedRun"]) -> list[dict[str, Any]]:
    """Print (stderr) a warning for each site of the plan without a passing probe of its current
    profile (orchestrator/results/probes.py); their JSON, shaped as the plan's lints, for --json."""
    from orchestrator.results.probes import probe_warnings

    targets = {p.spec.site + (f":{p.spec.system}" if p.spec.system else "") for p in plans}
    warnings = probe_warnings(c.sessions, targets, c.sites_dirs)
    for warning in warnings:
        err_console.print(warning.text(), markup=False, highlight=False, soft_wrap=True)
    return [warning.as_json() for warning in warnings]
