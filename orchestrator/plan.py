"""Stages 3-5 driven together: resolve each run on its site, render its script, record it.

``plan_sweep`` is pure apart from reading site profiles; ``record_plan`` writes the
database rows and run directories, adding nothing that is already there.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from orchestrator import __version__
from orchestrator.db.models import Run, SweepRecord
from orchestrator.expand import RunSpec, expand
from orchestrator.render import RunFiles, environment, render_script
from orchestrator.resolve import Resolved, resolve
from orchestrator.sites import SiteProfile, load_site
from orchestrator.sweep import LoadedSweep


@dataclass
class PlannedRun:
    resolved: Resolved
    files: RunFiles
    script: str | None  # None when skipped
    new: bool = True

    @property
    def spec(self) -> RunSpec:
        return self.resolved.spec

    @property
    def status(self) -> str:
        return "skipped" if self.resolved.skipped else "planned"


def run_dir_for(runs_root: Path, spec: RunSpec) -> Path:
    return runs_root / spec.sweep / spec.id


def plan_sweep(loaded: LoadedSweep, runs_root: Path, env: Mapping[str, str] | None = None,
               sites_dirs: list[Path] | None = None, python: str | None = None) -> list[PlannedRun]:
    """Every run of the sweep, resolved and rendered (or skipped with a reason)."""
    env = os.environ if env is None else env
    profiles: dict[str, SiteProfile] = {}
    jinja = environment()
    planned: list[PlannedRun] = []
    for spec in expand(loaded.sweep):
        target = f"{spec.site}:{spec.system}" if spec.system else spec.site
        if target not in profiles:
            profiles[target] = load_site(target, sites_dirs)
        site = profiles[target]
        interpreter = site.python or python or sys.executable
        resolved = resolve(spec, site, env, interpreter)
        files = RunFiles(run_dir_for(runs_root, spec).resolve())
        script = render_script(resolved, files, jinja) if not resolved.skipped else None
        planned.append(PlannedRun(resolved, files, script))
    return planned


def _sweep_record(session: Session, loaded: LoadedSweep) -> SweepRecord:
    digest = hashlib.sha256(loaded.text.encode()).hexdigest()
    name = loaded.sweep.name
    found = session.scalar(select(SweepRecord).where(SweepRecord.name == name, SweepRecord.content_hash == digest))
    if found:
        return found
    record = SweepRecord(name=name, path=str(Path(loaded.path).resolve()), content_hash=digest, content=loaded.text)
    session.add(record)
    session.flush()
    return record


def _run_row(plan: PlannedRun, sweep_id: int) -> Run:
    spec, resolved = plan.spec, plan.resolved
    placement, site = resolved.placement, resolved.site
    script_hash = hashlib.sha256(plan.script.encode()).hexdigest() if plan.script else None
    return Run(
        id=spec.id, sweep_id=sweep_id, sweep=spec.sweep, experiment=spec.experiment,
        workload=spec.workload, site=spec.site, system=spec.system, status=plan.status,
        skip_reason=resolved.skip_reason, devices=spec.devices,
        nodes=placement.nodes if placement else None,
        tasks_per_node=placement.tasks_per_node if placement else None,
        queue=placement.queue if placement else None, precision=spec.precision,
        strategy=spec.strategy, batch_size=spec.batch_size, seq_len=spec.seq_len, repeat=spec.repeat,
        params=json.dumps(spec.param_dict, sort_keys=True),
        spec=json.dumps({**asdict(spec), "params": spec.param_dict, "id": spec.id}, sort_keys=True),
        walltime_s=spec.walltime_s, max_attempts=spec.max_attempts, retry_on=json.dumps(list(spec.retry_on)),
        device_type=site.device.type, device_model=site.device.model,
        peak_tflops=placement.peak_tflops if placement else None, scheduler=site.scheduler,
        script_hash=script_hash, script=plan.script, run_dir=str(plan.files.run_dir),
        cost_per_node_hour=site.cost_per_node_hour, orch_version=__version__,
    )


def _write_run_dir(plan: PlannedRun) -> None:
    plan.files.run_dir.mkdir(parents=True, exist_ok=True)
    spec = plan.spec
    plan.files.spec.write_text(json.dumps({**asdict(spec), "params": spec.param_dict, "id": spec.id,
                                           "skip_reason": plan.resolved.skip_reason}, indent=2, sort_keys=True))
    if plan.script is not None:
        plan.files.script.write_text(plan.script)
        plan.files.script.chmod(0o755)


def record_plan(sessions: sessionmaker[Session], loaded: LoadedSweep, plans: list[PlannedRun]) -> int:
    """Store new runs (and their run directories); returns how many were new.

    Runs already in the database are left as they are (their ``new`` flag is cleared),
    so planning twice adds nothing and never disturbs a run in flight.
    """
    for _ in range(3):  # another orch process may insert the same ids at the same time
        try:
            with sessions.begin() as session:
                sweep = _sweep_record(session, loaded)
                ids = [p.spec.id for p in plans]
                existing: set[str] = set()
                for chunk in range(0, len(ids), 500):
                    existing.update(session.scalars(select(Run.id).where(Run.id.in_(ids[chunk:chunk + 500]))))
                fresh = [p for p in plans if p.spec.id not in existing]
                for plan in plans:
                    plan.new = plan.spec.id not in existing
                for plan in fresh:
                    _write_run_dir(plan)
                session.add_all(_run_row(p, sweep.id) for p in fresh)
            return len(fresh)
        except IntegrityError:
            continue
    raise RuntimeError("could not record the plan: the database kept changing under it")
