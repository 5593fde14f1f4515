"""``orch sites probe``: one short job that proves, before a campaign, what every run depends on.

The probe goes the way a run goes: a :class:`~orchestrator.plan.expand.RunSpec` of the ``probe``
workload (``workloads/probe.py``) resolved on the site's profile by the plan's own resolver and
rendered by its own templates (the profile's setup lines, environment, launcher and Python), then
handed to the site's executor (Slurm, PBS, local) as a :class:`JobRequest`. What differs from a
run: it is not a row of ``runs`` (a probe is no result, and ``orch status`` counts only a
campaign's runs) but of ``site_probes``, written before the scheduler call as a run's attempt is;
its run directory is ``<state>/probes/<site>/<probe id>/``, where orch writes a marker with a
random token at submit time that the job must read back.

Following: :func:`follow_probes` asks the executor about the probes' jobs until they end, then
:func:`finish_probe` reads the report (the metrics file's ``probe`` section), judges it
(:mod:`orchestrator.run.probe_checks`) and stores the verdict with the profile's hash.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import pydantic_core
from pydantic import TypeAdapter, ValidationError
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import UserError
from orchestrator.plan.expand import RunSpec
from orchestrator.plan.render import render_script
from orchestrator.plan.resolve import Resolved, SiteResolver
from orchestrator.plan.runfiles import RunFiles, job_name
from orchestrator.results.db.models import SiteProbe
from orchestrator.results.ingest import read_bounded
from orchestrator.run.executors.base import JobInfo, JobRequest, SchedulerError
from orchestrator.run.probe_checks import Check, Expected, JobEnd, judge, setup_modules
from orchestrator.run.probe_report import read_report
from orchestrator.run.submit import Executors
from orchestrator.sites.fingerprint import fingerprint
from orchestrator.sites.launchers import get_launcher
from orchestrator.sites.profiles import SiteProfile, load_site
from orchestrator.states import ProbeState
from workloads.registry import PROBE_MARKER

PROBE_SWEEP = "probe"  # the spec's sweep name: the rendered script's comment line says "probe/..."
PROBE_WALLTIME_S = 600  # seconds: the job takes seconds; a short walltime finds the quickest queue
_EXPECTED = TypeAdapter(Expected)
EXPECTED_FILE = "probe.json"  # beside job.sh: what the probe was submitted to find
# The backend each device type's all-reduce runs on (workloads/harness/dist.py backend_for; xpu may
# be xccl or ccl, whichever the node's PyTorch has).
BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl/ccl", "hpu": "hccl"}


class ProbeRefused(UserError):
    """The profile cannot run the probe at all (the resolver's reason): nothing was submitted."""


@dataclass(frozen=True)
class Submitted:
    probe_id: int
    target: str
    job_id: str | None  # None: the scheduler did not take it (the probe is finished, failed)
    run_dir: Path
    reason: str = ""


def probe_spec(target: str, profile: SiteProfile, nodes: int, devices: int) -> RunSpec:
    name, _, system = target.partition(":")
    precision = "fp32" if "fp32" in profile.device.precisions else profile.device.precisions[0]
    return RunSpec(sweep=PROBE_SWEEP, experiment=f"{nodes}-node", workload="probe", site=name,
                   system=system or None, devices=devices, precision=precision, strategy=None, batch_size=None,
                   seq_len=None, repeat=0, params=(), walltime_s=PROBE_WALLTIME_S)


def resolve_probe(target: str, profile: SiteProfile, nodes: int, env: Mapping[str, str],
                  python: str | None = None) -> Resolved:
    """The probe placed on the site as a run would be: two ranks on one node (one where a node has
    one device, or the launcher starts one process), or every device of ``nodes`` nodes."""
    if nodes < 1:
        raise UserError(f"--nodes: expected 1 or more, got {nodes}")
    if nodes > profile.max_nodes:
        raise ProbeRefused(f"cannot probe {target} on {nodes} nodes: its profile allows at most "
                           f"{profile.max_nodes} (max_nodes)")
    per_node = profile.device.per_node
    # Several nodes: whole nodes, as a multi-node run asks for them (resolve refuses part-nodes).
    tries = [nodes * per_node] if nodes > 1 else list(dict.fromkeys([min(2, per_node), 1]))
    resolver = SiteResolver(profile, env, profile.python or python or sys.executable)
    resolved = None
    for devices in tries:
        resolved = resolver.resolve(probe_spec(target, profile, nodes, devices))
        if not resolved.skipped:
            return resolved
    assert resolved is not None
    raise ProbeRefused(f"cannot probe {target}: {resolved.skip_reason}")


def _expected(resolved: Resolved, run_dir: Path, token: str) -> Expected:
    placement, site = resolved.placement, resolved.site
    assert placement is not None
    single = get_launcher(placement.launcher).single_process
    files = RunFiles(run_dir)
    return Expected(token=token, nodes=placement.nodes, ranks=1 if single else resolved.spec.devices,
                    device_type=site.device.type, python=site.python or sys.executable,  # as resolve_probe
                    backend=BACKENDS.get(site.device.type, "the device's"), run_dir=str(run_dir),
                    modules=setup_modules(site.setup), stdout=str(files.stdout), stderr=str(files.stderr))


def submit_probe(sessions: sessionmaker[Session], executors: Executors, state_dir: Path, target: str,
                 sites_dirs: list[Path] | None, env: Mapping[str, str], nodes: int = 1) -> Submitted:
    """Resolve, render and submit one probe of ``target`` (``site`` or ``site:system``).

    The row (with the token) is committed before the scheduler is called, the job id after; a
    scheduler that refuses the job finishes the probe as failed, with its words."""
    profile = load_site(target, sites_dirs)
    resolved = resolve_probe(target, profile, nodes, env)
    placement = resolved.placement
    assert placement is not None
    print_ = fingerprint(target, sites_dirs)
    token = secrets.token_hex(16)
    with sessions.begin() as session:
        row = SiteProbe(site=print_.site, system=print_.system, profile_hash=print_.sha256,
                        profile_path=str(print_.path.resolve()), state=ProbeState.SUBMITTING,
                        scheduler=profile.scheduler, run_dir="", token=token, nodes_requested=placement.nodes,
                        ranks_requested=0)
        session.add(row)
        session.flush()
        run_dir = (state_dir / "probes" / target.replace(":", "+") / str(row.id)).resolve()
        expected = _expected(resolved, run_dir, token)
        row.run_dir, row.ranks_requested = str(run_dir), expected.ranks
        probe_id = row.id
    files = RunFiles(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / PROBE_MARKER).write_text(token + "\n")  # written on this (the login) node
    (run_dir / EXPECTED_FILE).write_text(json.dumps(expected.as_dict(), indent=2) + "\n")
    files.script.write_text(render_script(resolved, files))
    files.script.chmod(0o755)
    spec = resolved.spec
    request = JobRequest(run_id=spec.id, attempt=1, script_path=files.script, run_dir=run_dir,
                         job_name=job_name(spec.id, 1, secrets.token_hex(3)), walltime_s=placement.walltime_s,
                         nodes=placement.nodes, tasks_per_node=placement.tasks_per_node, queue=placement.queue)
    executor = executors.for_site(print_.site, print_.system)
    try:
        result = executor.submit([request])
        job_id = result.job_ids[0]
        reason = "" if job_id else (result.refused.get(request.job_name) or result.deferred.get(request.job_name)
                                    or result.uncertain.get(request.job_name) or "not submitted (no reason given)")
    except Exception as exc:  # the executor itself broke: the probe's finding, in its words
        job_id, reason = None, (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
    now = datetime.now(timezone.utc)
    if job_id is None:
        end = JobEnd("refused", reason, scheduler=resolved.site.scheduler)
        _store(sessions, probe_id, judge(None, expected, end, False), None, now)
    else:
        with sessions.begin() as session:
            session.execute(update(SiteProbe).where(SiteProbe.id == probe_id).values(
                job_id=job_id, state=ProbeState.SUBMITTED, submitted_at=now))
    return Submitted(probe_id, target, job_id, run_dir, reason)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    # Not the template's own "orch: ..." lines, nor DeepSpeed's accelerator warning: the error is after them.
    kept = [line.strip() for line in text.splitlines()
            if line.strip() and "[WARNING]" not in line and not line.startswith("orch: ")]
    return " | ".join(kept[-lines:])[-600:]


def _columns(checks: list[Check], report: dict[str, Any] | None) -> dict[str, Any]:
    """Each check's outcome as the row's column of the same name."""
    by = {c.name: c for c in checks}
    ar = (report or {}).get("allreduce") or {}
    ranks = (report or {}).get("ranks") or []
    return {
        "python": by["python"].value, "torch": by["torch"].value, "deepspeed": by["deepspeed"].value,
        "devices": by["devices"].value, "allreduce_gbs": by["allreduce"].value if ar.get("ok") else None,
        "allreduce_backend": ar.get("backend"), "nodes": by["nodes"].value,
        "run_dir_visible": by["run_dir_visible"].value, "modules": by["modules"].value,
        "hostnames": " ".join(sorted({str(r.get("hostname")) for r in ranks if isinstance(r, dict)})) or None,
    }


def _store(sessions: sessionmaker[Session], probe_id: int, checks: list[Check], report_text: str | None,
           now: datetime, report: dict[str, Any] | None = None) -> None:
    failed = [c.name for c in checks if not c.ok]
    with sessions.begin() as session:
        session.execute(update(SiteProbe).where(SiteProbe.id == probe_id).values(
            state=ProbeState.FINISHED, finished_at=now, passed=not failed, failed_checks=",".join(failed) or None,
            checks=json.dumps([c.as_dict() for c in checks]), report=report_text, **_columns(checks, report)))


def _stored_expected(files: RunFiles, row: SiteProbe) -> Expected:
    """What the probe was submitted to find, from ``probe.json`` beside the job's files: checked
    for its types, since the job can rewrite it; the row's own figures where it is not usable."""
    raw = read_bounded(files.run_dir / EXPECTED_FILE, limit=1024 * 1024)
    try:
        data = pydantic_core.from_json(raw) if isinstance(raw, bytes) else None
        if isinstance(data, dict):
            known = {k: v for k, v in data.items() if k in Expected.__dataclass_fields__ and k != "token"}
            return _EXPECTED.validate_python({**known, "token": row.token})
    except (ValueError, ValidationError):
        pass
    return Expected(token=row.token, nodes=row.nodes_requested, ranks=row.ranks_requested, device_type="?",
                    python="?", backend="?", run_dir=row.run_dir)


def finish_probe(sessions: sessionmaker[Session], row: SiteProbe, info: JobInfo) -> None:
    """Judge an ended probe job from its report (and, without one, from its logs) and store it."""
    files = RunFiles(Path(row.run_dir))
    expected = _stored_expected(files, row)
    report, text, refused = read_report(files.metrics)
    end = JobEnd(str(info.state.value), info.reason or "", info.exit_code, _tail(files.stderr))
    wrote_logs = files.stdout.exists() or files.stderr.exists()
    checks = judge(report, expected, end, wrote_logs)
    if refused:  # the job wrote a report orch cannot trust: judged as none, and said why
        checks[0] = Check("python", False, None, f"the probe's report was refused: {refused}",
                          "probe again; a report the probe itself wrote passes (workloads/probe.py)")
    _store(sessions, row.id, checks, text, datetime.now(timezone.utc), report)


def pending_probes(sessions: sessionmaker[Session], target: str | None = None,
                   ids: list[int] | None = None) -> list[SiteProbe]:
    """Probes whose job the scheduler has and orch has not judged yet (oldest first)."""
    query = select(SiteProbe).where(SiteProbe.state == ProbeState.SUBMITTED)
    if target:
        site, _, system = target.partition(":")
        query = query.where(SiteProbe.site == site)
        query = query.where(SiteProbe.system == system) if system else query
    if ids is not None:
        query = query.where(SiteProbe.id.in_(ids))
    with sessions() as session:
        return list(session.scalars(query.order_by(SiteProbe.id)))


def follow_probes(sessions: sessionmaker[Session], executors: Executors, probes: list[SiteProbe],
                  timeout_s: float, progress: Callable[[SiteProbe, JobInfo | None, float], None] | None = None,
                  ) -> list[int]:
    """Ask each probe's executor about its job until every one ended (then judged and stored) or
    ``timeout_s`` passed; returns the ids still waiting (their jobs stay with the scheduler)."""
    start = time.monotonic()
    waiting = {p.id: p for p in probes}
    interval = 0.5
    while waiting:
        by_target: dict[tuple[str, str | None], list[SiteProbe]] = {}
        for probe in waiting.values():
            by_target.setdefault((probe.site, probe.system), []).append(probe)
        for (site, system), group in by_target.items():
            try:
                infos = executors.for_site(site, system).query([p.job_id for p in group if p.job_id])
            except SchedulerError:  # the scheduler cannot be asked now (sacct down): ask again next time
                infos = {}
            for probe in group:
                info = infos.get(probe.job_id or "")
                if info is not None and info.ended:
                    finish_probe(sessions, probe, info)
                    del waiting[probe.id]
                elif progress is not None:
                    progress(probe, info, time.monotonic() - start)
        if not waiting or time.monotonic() - start >= timeout_s:
            break
        time.sleep(min(interval, max(0.0, timeout_s - (time.monotonic() - start))))
        interval = min(interval * 1.5, 5.0)
    return list(waiting)


def load_probes(sessions: sessionmaker[Session], ids: list[int]) -> list[SiteProbe]:
    with sessions() as session:
        return list(session.scalars(select(SiteProbe).where(SiteProbe.id.in_(ids)).order_by(SiteProbe.id)))


def probe_row(probe: SiteProbe) -> dict[str, Any]:
    """A probe as JSON for scripts: its columns, the checks parsed, the report parsed."""
    data: dict[str, Any] = {column.name: getattr(probe, column.name) for column in SiteProbe.__table__.columns}
    data.pop("token", None)
    data["target"] = f"{probe.site}:{probe.system}" if probe.system else probe.site
    data["checks"] = json.loads(probe.checks) if probe.checks else []
    try:
        data["report"] = json.loads(probe.report).get("probe") if probe.report else None
    except (ValueError, AttributeError):
        data["report"] = None
    return data
