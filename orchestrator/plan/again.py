"""A recorded run resolved and rendered again, from its recorded spec and its site's profile as
the profile is now: the next epoch of a repeated campaign (orchestrator/run/epoch.py) runs the
same measurement in the environment the site has today (a new module, driver, launcher flag),
which is what the campaign is repeated to see.

The spec comes from ``runs.spec`` (what the run *is*; its id is checked), not from the sweep
file, so an epoch repeats exactly the runs recorded, whatever happened to the file since.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from orchestrator.errors import UserError
from orchestrator.plan.expand import RunSpec
from orchestrator.plan.record import PlannedRun, StagedFiles, _run_row, _spec_fields
from orchestrator.plan.render import ScriptRenderer
from orchestrator.plan.resolve import MemoryCache, SiteResolver
from orchestrator.plan.runfiles import RunFiles
from orchestrator.sites.profiles import load_site


def spec_from_json(run_id: str, text: str) -> RunSpec:
    """The RunSpec a ``runs.spec`` JSON text holds; a run whose spec no longer hashes to its id
    (written by another orch version, or edited by hand) is refused by name."""
    data: dict[str, Any] = json.loads(text)
    data.pop("id", None)
    params = data.pop("params", {}) or {}
    data["params"] = tuple(sorted(params.items()))
    data["retry_on"] = tuple(data.get("retry_on") or ())
    known = set(RunSpec.__dataclass_fields__)
    spec = RunSpec(**{k: v for k, v in data.items() if k in known})
    if spec.id != run_id:
        raise UserError(f"run {run_id}: its recorded spec hashes to {spec.id}, not to its id (recorded by "
                        "another version of orch?): plan its sweep again instead of repeating it")
    return spec


def render_again(runs: list[tuple[RunSpec, str]], sites_dirs: list[Path] | None = None,
                 env: Mapping[str, str] | None = None) -> list[PlannedRun]:
    """Each (spec, run directory) resolved and rendered from its site's current profile."""
    env = os.environ if env is None else env
    resolvers: dict[str, SiteResolver] = {}
    memory: MemoryCache = {}
    renderer = ScriptRenderer()
    out: list[PlannedRun] = []
    for spec, run_dir in runs:
        target = f"{spec.site}:{spec.system}" if spec.system else spec.site
        if target not in resolvers:
            site = load_site(target, sites_dirs)
            resolvers[target] = SiteResolver(site, env, site.python or sys.executable, memory)
        resolved = resolvers[target].resolve(spec)
        script = None if resolved.skipped else renderer.render(resolved, RunFiles(Path(run_dir)))
        out.append(PlannedRun(resolved, run_dir, script, new=False))
    return out


def plan_row(plan: PlannedRun, sweep_id: int) -> dict[str, Any]:
    """The ``runs`` columns of a run rendered again (the same row a plan writes)."""
    return _run_row(plan, sweep_id, _spec_fields(plan.spec))


def stage_files(plans: list[PlannedRun]) -> StagedFiles:
    """Each run's ``spec.json`` and ``job.sh`` written beside their final names (publish or discard
    them); a run now skipped loses its ``job.sh``."""
    staged = StagedFiles()
    staged.stage(plans, [_spec_fields(p.spec) for p in plans])
    staged.removals += [os.path.join(p.run_dir, "job.sh") for p in plans if p.script is None]
    return staged
