"""Stages 3-5 driven together: resolve each run on its site, render its script, record it.

``plan_sweep`` is pure apart from reading site profiles; ``record_plan`` writes the
database rows and run directories, adding nothing that is already there.

Plans reach thousands of runs and are re-planned often, so what is the same for many runs
is worked out once: each site's resolver (account, launcher, queue per shape, memory
predictions) and each site's part of the script (see ``render.ScriptRenderer``). Records
go to the database in one bulk INSERT and run directories are written with plain system calls.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from orchestrator import __version__
from orchestrator.errors import SourceError, UserError, raise_all
from orchestrator.plan.expand import RunSpec, expand
from orchestrator.plan.render import RunFiles, ScriptRenderer
from orchestrator.plan.resolve import MemoryCache, Resolved, SiteResolver, charged_devices, shape_key
from orchestrator.plan.sweep import LoadedSweep, site_line
from orchestrator.sites.profiles import SiteProfile, load_site
from orchestrator.sites.vendors.base import recorded_strategy
from orchestrator.states import RunState

if TYPE_CHECKING:  # the database is imported by record_plan only: `orch plan --dry-run` needs none of it
    from sqlalchemy.orm import Session, sessionmaker

    from orchestrator.results.db.models import SweepRecord


@dataclass
class PlannedRun:
    resolved: Resolved
    run_dir: str  # absolute
    script: str | None  # None when skipped
    new: bool = True
    # The run's state in the database once recorded: its plan's status, unless it was already
    # handed to a scheduler (then that run's state, which re-planning leaves be). None: not recorded.
    recorded: RunState | None = None

    @property
    def spec(self) -> RunSpec:
        return self.resolved.spec

    @property
    def files(self) -> RunFiles:
        return RunFiles(Path(self.run_dir))

    @property
    def status(self) -> RunState:
        return RunState.SKIPPED if self.resolved.skipped else RunState.PLANNED


def plan_sweep(loaded: LoadedSweep, runs_root: Path, env: Mapping[str, str] | None = None,
               sites_dirs: list[Path] | None = None, python: str | None = None) -> list[PlannedRun]:
    """Every run of the sweep, resolved and rendered (or skipped with a reason)."""
    env = os.environ if env is None else env
    resolvers: dict[str, SiteResolver] = {}
    memory: MemoryCache = {}  # memory predictions, shared by the sites
    renderer = ScriptRenderer()
    sweep_dirs: dict[str, str] = {}  # by sweep name: the directory, resolved once
    planned: list[PlannedRun] = []

    def resolver_for(spec: RunSpec) -> SiteResolver:
        target = f"{spec.site}:{spec.system}" if spec.system else spec.site
        resolver = resolvers.get(target)
        if resolver is None:
            site = load_site(target, sites_dirs)
            resolver = resolvers[target] = SiteResolver(site, env, site.python or python or sys.executable, memory)
        return resolver

    specs = list(expand(loaded.sweep))
    errors: list[SourceError] = []
    for target in dict.fromkeys(f"{s.site}:{s.system}" if s.system else s.site for s in specs):
        try:  # each site once, up front: every unknown one is named where the sweep names it
            resolver_for(next(s for s in specs if (f"{s.site}:{s.system}" if s.system else s.site) == target))
        except SourceError as exc:
            errors.append(exc)  # the profile's own file:line
        except UserError as exc:
            line, field_ = site_line(loaded, target)
            errors.append(SourceError(loaded.path, line, field_, str(exc)))
    raise_all(errors)
    _trace_memory_ahead(specs, resolver_for)
    for spec in specs:
        resolved = resolver_for(spec).resolve(spec)
        sweep_dir = sweep_dirs.get(spec.sweep)
        if sweep_dir is None:
            sweep_dir = sweep_dirs[spec.sweep] = str((runs_root / spec.sweep).resolve())
        run_dir = sweep_dir + "/" + spec.id
        script = None if resolved.skipped else renderer.render(resolved, RunFiles(Path(run_dir)))
        planned.append(PlannedRun(resolved, run_dir, script))
    return planned


def _trace_memory_ahead(specs: list[RunSpec], resolver_for: Callable[[RunSpec], SiteResolver]) -> None:
    """Trace the memory of every run shape no cache holds, side by side in worker processes
    (``orchestrator.predict.memory.prefetch``), so that resolving each run afterwards only reads the caches:
    a first plan of a campaign traces tens to hundreds of small programs."""
    from orchestrator.predict import memory

    seen: set[tuple[Any, ...]] = set()
    wanted = []
    for spec in specs:
        if spec.workload not in memory.TRACED_WORKLOADS:
            continue
        shape = shape_key(spec)
        if shape is not None:
            key = (spec.site, spec.system, shape)  # per site: a vendor's site asks for no prediction
            if key in seen:
                continue
            seen.add(key)
        resolver = resolver_for(spec)
        if resolver.site_refusal() is not None or resolver.queue_refusal(spec) is not None:
            continue  # skipped on the environment or the queues' limits: nothing to trace
        inputs = resolver.traced_memory_inputs(spec)
        if inputs is not None:
            wanted.append(inputs)
    if wanted:
        try:
            workers = memory.trace_workers()
        except ValueError as exc:
            raise UserError(str(exc)) from None
        memory.prefetch(wanted, workers)


def _sweep_record(session: Session, loaded: LoadedSweep) -> SweepRecord:
    from sqlalchemy import select

    from orchestrator.results.db.models import SweepRecord

    digest = hashlib.sha256(loaded.text.encode()).hexdigest()
    name = loaded.sweep.name
    found = session.scalar(select(SweepRecord).where(SweepRecord.name == name, SweepRecord.content_hash == digest))
    if found:
        return found
    record = SweepRecord(name=name, path=str(Path(loaded.path).resolve()), content_hash=digest, content=loaded.text)
    session.add(record)
    session.flush()
    return record


def _price_columns(site: SiteProfile) -> dict[str, Any]:
    """The site's price (and the device's peak bandwidth, for MBU) as the run is planned: a later
    change of the profile leaves the run's figures be."""
    price = site.price
    if price is None:  # every key present either way: rows are written in bulk, column by column
        return {"cost_per_node_hour": None, "price_per_device_hour": None, "price_currency": None,
                "price_source": None, "peak_bandwidth_gbs": site.device.bandwidth_gbs}
    per_node = site.device.per_node
    return {"cost_per_node_hour": price.node_hour(per_node), "price_per_device_hour": price.device_hour(per_node),
            "price_currency": price.currency, "price_source": f"{price.basis}: {price.source} ({price.date})",
            "peak_bandwidth_gbs": site.device.bandwidth_gbs}


_SPEC_FIELDS = tuple(f.name for f in fields(RunSpec))
# Parameters that say how a global batch is split, not what is computed: strong scaling compares
# runs that differ only in these (and in devices and per-device batch).
SPLIT_PARAMS = frozenset({"grad_accum"})


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _spec_fields(spec: RunSpec) -> dict[str, Any]:
    """``{**asdict(spec), "params": ..., "id": ...}`` (asdict's deep copy costs ~100 us a run)."""
    out = {name: getattr(spec, name) for name in _SPEC_FIELDS}
    out["params"] = spec.param_dict
    out["id"] = spec.id
    return out


def _run_row(plan: PlannedRun, sweep_id: int, spec_fields: dict[str, Any]) -> dict[str, Any]:
    """The ``runs`` row of a planned run, by column."""
    spec, resolved = plan.spec, plan.resolved
    placement, site = resolved.placement, resolved.site
    script_hash = hashlib.sha256(plan.script.encode()).hexdigest() if plan.script else None
    return dict(
        id=spec.id, sweep_id=sweep_id, sweep=spec.sweep, experiment=spec.experiment,
        workload=spec.workload, site=spec.site, system=spec.system, status=plan.status,
        skip_reason=resolved.skip_reason, predicted_peak_gb=resolved.predicted_peak_gb,
        predicted_step_s=resolved.predicted_step_s, predicted_run_s=resolved.predicted_run_s, devices=spec.devices,
        nodes=placement.nodes if placement else None,
        tasks_per_node=placement.tasks_per_node if placement else None,
        queue=placement.queue if placement else None, precision=spec.precision,
        strategy=recorded_strategy(placement.launcher if placement else None, spec.workload, spec.devices,
                                   spec.strategy),
        batch_size=spec.batch_size, seq_len=spec.seq_len, repeat=spec.repeat,
        params=_compact(spec_fields["params"]),
        shape_params=_compact({k: v for k, v in spec_fields["params"].items() if k not in SPLIT_PARAMS}),
        spec=_compact(spec_fields),
        walltime_s=placement.walltime_s if placement else spec.walltime_s, max_attempts=spec.max_attempts,
        retry_on=json.dumps(list(spec.retry_on)),
        device_type=site.device.type, device_model=site.device.model,
        peak_tflops=placement.peak_tflops if placement else None, scheduler=site.scheduler,
        script_hash=script_hash, script=plan.script, run_dir=plan.run_dir,
        **_price_columns(site), charged_devices=charged_devices(resolved), orch_version=__version__,
    )


def spec_json(plan: PlannedRun, spec_fields: dict[str, Any] | None = None) -> str:
    """The text of the run directory's ``spec.json``."""
    document = dict(spec_fields if spec_fields is not None else _spec_fields(plan.spec))
    document["skip_reason"] = plan.resolved.skip_reason
    return json.dumps(document, indent=2, sort_keys=True)


def _write(path: str, text: str, mode: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
        data = memoryview(text.encode())
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


class StagedFiles:
    """Run directories written in two steps, so a full disk (or any failed write) leaves nothing
    half-written: every file is first written beside its final name (``.name.tmp``), then all are
    renamed into place. ``discard`` removes the temporary files and every folder made here."""

    def __init__(self) -> None:
        self.made: list[str] = []  # folders this plan created, parents first
        self.files: list[tuple[str, str]] = []  # (temporary, final)
        self.removals: list[str] = []  # files that go when the rest is published

    def stage(self, plans: list[PlannedRun], spec_fields: list[dict[str, Any]]) -> None:
        """Each run's directory with its ``spec.json`` and, when it runs, ``job.sh`` (0755)."""
        known: set[str] = set()
        for plan, fields_ in zip(plans, spec_fields):
            run_dir = plan.run_dir
            parent = os.path.dirname(run_dir)
            if parent not in known:
                self._makedirs(parent)
                known.add(parent)
            self._makedirs(run_dir)
            self._write(os.path.join(run_dir, "spec.json"), spec_json(plan, fields_))
            if plan.script is not None:
                self._write(os.path.join(run_dir, "job.sh"), plan.script, 0o755)

    def _makedirs(self, folder: str) -> None:
        missing: list[str] = []
        while folder and not os.path.isdir(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:
                continue  # another orch process made it: not ours to remove
            self.made.append(path)

    def _write(self, final: str, text: str, mode: int | None = None) -> None:
        temporary = os.path.join(os.path.dirname(final), f".{os.path.basename(final)}.tmp")
        self.files.append((temporary, final))
        _write(temporary, text, mode)

    def publish(self) -> None:
        for temporary, final in self.files:
            os.replace(temporary, final)
        for path in self.removals:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.files.clear()
        self.removals.clear()

    def discard(self) -> None:
        for temporary, _ in self.files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        for folder in reversed(self.made):
            shutil.rmtree(folder, ignore_errors=True)
        self.files.clear()
        self.made.clear()
        self.removals.clear()


def _insert_runs(session: Session, rows: list[dict[str, Any]]) -> None:
    """One bulk INSERT of the rows (columns: all that any row names; absent ones are NULL)."""
    from itertools import chain

    from orchestrator.results.db.bulk import insert_rows
    from orchestrator.results.db.models import Run, utcnow

    now = utcnow()
    named = list(dict.fromkeys(chain.from_iterable(rows)))
    insert_rows(session.connection(), Run.__table__, [*named, "created_at", "updated_at"],  # type: ignore[arg-type]
                [(*map(row.get, named), now, now) for row in rows])


# Runs that were never handed to a scheduler: re-planning brings them up to date. A cancelled run
# counts only while it has no attempt (`orch cancel` dropped it before submission); planning the
# sweep again asks for it again.
RECONCILED = (RunState.PLANNED, RunState.SKIPPED, RunState.CANCELLED)
# Columns a run's row takes from its plan and that re-planning may change (not its id, its sweep
# name or its creation time). Anything that feeds the script shows in ``script_hash``.
_PLAN_COLUMNS_SKIP = frozenset({"id", "sweep_id"})


@dataclass
class RecordReport:
    """What :func:`record_plan` did: new runs, and what re-planning changed in the rest."""

    new: int = 0
    # "re-rendered", "skipped -> planned", "planned -> skipped", "cancelled -> planned", ...: runs.
    changes: dict[str, int] = field(default_factory=dict)
    # Runs already handed to a scheduler (or finished), left as they are, by state.
    kept: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """What re-planning changed, for people (empty when it changed nothing)."""
        out = [", ".join(f"{n} {what}" for what, n in sorted(self.changes.items()))] if self.changes else []
        if self.kept:
            out.append("left as they are (already submitted): " +
                       ", ".join(f"{n} {state}" for state, n in sorted(self.kept.items())))
        return out


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, float) and isinstance(new, float):
        return abs(old - new) <= 1e-9 * max(abs(old), abs(new))
    return bool(old == new)


def _change_of(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """How re-planning changes a recorded run, or None when the plan is what is recorded."""
    before, after = str(old["status"]), str(new["status"])
    if before != after:
        return f"{before} -> {after}"
    if old.get("script_hash") != new.get("script_hash"):
        return "scripts re-rendered"
    if any(not _same(old.get(k), v) for k, v in new.items() if k not in _PLAN_COLUMNS_SKIP):
        return "updated"  # a prediction, a price, a skip reason: the row, not the script
    return None


def _reconcile(session: Session, sweep_id: int, plans: list[PlannedRun], existing: dict[str, str],
               report: RecordReport, staged: StagedFiles) -> None:
    """Bring each recorded run that was never submitted up to date with its new plan: its row,
    its ``spec.json`` and its ``job.sh`` (removed when the run is now skipped).

    The update is conditional on the run still being unsubmitted, and the files are written
    inside the same transaction, before it commits: a submit that claims the run (a conditional
    UPDATE of its own) waits for this transaction and then reads the new script."""
    from sqlalchemy import exists, select, update

    from orchestrator.results.db.models import Attempt, Run, utcnow

    candidates = [p for p in plans if existing.get(p.spec.id) in RECONCILED]
    for plan in plans:
        state = existing.get(plan.spec.id)
        if state is not None and state not in RECONCILED:
            report.kept[state] = report.kept.get(state, 0) + 1
    if not candidates:
        return
    columns = [c for c in Run.__table__.columns if c.name not in ("created_at", "updated_at")]
    recorded: dict[str, dict[str, Any]] = {}
    ids = [p.spec.id for p in candidates]
    for chunk in range(0, len(ids), 500):
        for row in session.execute(select(*columns).where(Run.id.in_(ids[chunk:chunk + 500]))):
            recorded[row.id] = dict(row._mapping)
    never_submitted = ~exists().where(Attempt.run_id == Run.id)
    now = utcnow()
    for plan in candidates:
        old = recorded.get(plan.spec.id)
        if old is None:
            continue
        fields_ = _spec_fields(plan.spec)
        new = _run_row(plan, sweep_id, fields_)
        change = _change_of(old, new)
        if change is None:
            continue
        values = {k: v for k, v in new.items() if k != "id"}
        done = session.execute(update(Run).where(Run.id == plan.spec.id, Run.status.in_(RECONCILED), never_submitted)
                               .values(**values, updated_at=now).execution_options(synchronize_session=False))
        if getattr(done, "rowcount", 0) != 1:
            report.kept["submitted meanwhile"] = report.kept.get("submitted meanwhile", 0) + 1
            continue
        staged.stage([plan], [fields_])
        if plan.script is None:  # a skipped run has no script to submit
            staged.removals.append(os.path.join(plan.run_dir, "job.sh"))
        report.changes[change] = report.changes.get(change, 0) + 1


def record_plan(sessions: sessionmaker[Session], loaded: LoadedSweep, plans: list[PlannedRun]) -> RecordReport:
    """Store new runs (and their run directories) and reconcile the runs already recorded.

    A recorded run that was never submitted (planned, skipped, or cancelled before submission)
    takes its new plan: status, skip reason, predictions and script, row and files alike. A run
    handed to a scheduler is never touched. Planning twice with nothing changed changes nothing.
    """
    from sqlalchemy import select
    from sqlalchemy.exc import IntegrityError

    from orchestrator.results.db.models import Run

    for _ in range(3):  # another orch process may insert the same ids at the same time
        report = RecordReport()
        staged = StagedFiles()
        try:
            with sessions.begin() as session:
                sweep = _sweep_record(session, loaded)
                ids = [p.spec.id for p in plans]
                existing: dict[str, str] = {}
                for chunk in range(0, len(ids), 500):
                    existing.update((run_id, status) for run_id, status in session.execute(
                        select(Run.id, Run.status).where(Run.id.in_(ids[chunk:chunk + 500]))))
                fresh = [p for p in plans if p.spec.id not in existing]
                for plan in plans:
                    plan.new = plan.spec.id not in existing
                spec_fields = [_spec_fields(p.spec) for p in fresh]
                staged.stage(fresh, spec_fields)
                _insert_runs(session, [_run_row(p, sweep.id, f) for p, f in zip(fresh, spec_fields)])
                _reconcile(session, sweep.id, plans, existing, report, staged)
                report.new = len(fresh)
                # Every file is written: put them in place before the rows commit, so a submit
                # that claims a run (waiting on this transaction) reads its new script.
                staged.publish()
            for plan in plans:
                state = existing.get(plan.spec.id)
                plan.recorded = plan.status if state is None or state in RECONCILED else RunState(state)
            return report
        except IntegrityError:
            staged.discard()
            continue
        except OSError as exc:
            staged.discard()
            raise _write_error(exc, plans) from None
        except BaseException:
            staged.discard()
            raise
    raise RuntimeError("could not record the plan: the database kept changing under it")


def _write_error(exc: OSError, plans: list[PlannedRun]) -> UserError:
    """A run folder that could not be written (a full disk, a quota, a read-only or unwritable
    folder): one line naming where, and that nothing was recorded."""
    where = (os.path.dirname(str(exc.filename)) if exc.filename
             else os.path.dirname(os.path.dirname(plans[0].run_dir)) if plans else "the runs folder")
    hint = {errno.ENOSPC: " (the disk is full: free space, or set ORCH_HOME to a larger disk)",
            errno.EDQUOT: " (over your disk quota)"}.get(exc.errno or 0, "")
    return UserError(f"cannot write the run folders: {where}: {exc.strerror or exc}{hint}; nothing was recorded "
                     "and no run folder of this plan was left behind: plan again once it is fixed")
