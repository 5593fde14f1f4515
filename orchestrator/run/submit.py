"""Stage 6: planned runs handed to their site's scheduler, never twice.

For each run the claim (``planned`` -> ``submitting``) and the attempt row (the
intent) are committed before the scheduler is called; the job id is committed
after. Two processes cannot claim the same run: the claim is a conditional
UPDATE whose row count says who won.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from sqlalchemy import CursorResult, delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from orchestrator import __version__
from orchestrator.plan.runfiles import RunFiles, job_name
from orchestrator.results.db.models import Attempt, Run, ScriptText
from orchestrator.results.db.results import record_results
from orchestrator.run.executors import Executor, JobRequest, executor_for
from orchestrator.run.executors.base import SubmitResult
from orchestrator.states import AttemptState, FailureClass, RunState

SUBMITTABLE = (RunState.PLANNED, RunState.RETRY)


@dataclass(frozen=True)
class SubmitReport:
    """What :func:`submit_runs` did, by run id."""

    submitted: list[tuple[str, str]] = field(default_factory=list)  # (run id, job id)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (run id, reason)
    deferred: list[tuple[str, str]] = field(default_factory=list)  # (run id, reason): submitted later
    # The part of ``deferred`` whose submit command never reached the scheduler (connection refused,
    # controller unreachable): certainly not submitted, so ``orch submit`` does not count them as done.
    unreached: list[tuple[str, str]] = field(default_factory=list)
    would_submit: list[str] = field(default_factory=list)  # dry run
    calls: dict[str, int] = field(default_factory=dict)


# What qsub (OpenPBS: errno 15010, "cannot connect to server") and sbatch print when they could not
# reach the server at all: no job can exist then, unlike a command that timed out after sending it.
_UNREACHED = ("connection refused", "cannot connect to server", "could not connect", "pbs_connect",
              "errno=15010", "unable to contact slurm controller", "connection reset")


# What a submit command that could not be started at all says (not on PATH, not executable):
# `timeout`'s own words around it, the shell's, Python's. Nothing reached a scheduler then.
_NOT_STARTED = ("failed to run command", "command not found", "no such file or directory: '",
                "permission denied: '")


def server_unreached(reason: str) -> bool:
    """Whether a submit command's error says it never reached the scheduler."""
    low = reason.lower()
    return any(marker in low for marker in _UNREACHED) or command_not_started(reason)


def command_not_started(reason: str) -> bool:
    """Whether a submit command's error says the command itself could not be run (qsub or sbatch
    not on PATH): the run never reached a scheduler and stays plannable."""
    low = reason.lower()
    return any(marker in low for marker in _NOT_STARTED)


def executor_folder(state_dir: Path, site: str) -> Path:
    return state_dir / "jobs" / site


class Executors:
    """One executor per site for the life of a command (they keep handles and counts)."""

    def __init__(self, state_dir: Path, sites_dirs: list[Path] | None = None) -> None:
        self.state_dir, self.sites_dirs = state_dir, sites_dirs
        self._by_site: dict[str, Executor] = {}
        self._profile_hashes: dict[str, str | None] = {}

    def for_site(self, site: str, system: str | None = None) -> Executor:
        key = f"{site}:{system}" if system else site
        if key not in self._by_site:
            from orchestrator.sites.profiles import load_site  # pydantic and YAML only when a site is needed

            profile = load_site(key, self.sites_dirs)
            self._by_site[key] = executor_for(profile.scheduler, executor_folder(self.state_dir, site),
                                              profile.executor)
        return self._by_site[key]

    def profile_hash(self, site: str, system: str | None = None) -> str | None:
        """sha256 of the site's profile as it is now (an attempt's provenance); None where it cannot be read."""
        key = f"{site}:{system}" if system else site
        if key not in self._profile_hashes:
            from orchestrator.errors import UserError
            from orchestrator.sites.fingerprint import fingerprint

            try:
                self._profile_hashes[key] = fingerprint(key, self.sites_dirs).sha256
            except (OSError, UserError):
                self._profile_hashes[key] = None
        return self._profile_hashes[key]

    def calls(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for executor in self._by_site.values():
            for name, count in executor.calls.items():
                total[name] = total.get(name, 0) + count
        return total


def candidates(session: Session, site: str | None, sweep: str | None, run_ids: list[str] | None = None) -> list[Run]:
    query = select(Run).where(Run.status.in_(SUBMITTABLE))
    if site:
        query = query.where(Run.site == site)
    if sweep:
        query = query.where(Run.sweep == sweep)
    if run_ids is not None:
        query = query.where(Run.id.in_(run_ids))
    return list(session.scalars(query.order_by(Run.created_at, Run.id)))


def _archive_old_metrics(run_dir: Path, attempt: int) -> None:
    # A metrics file left by an earlier attempt must not be read as this attempt's.
    metrics = RunFiles(run_dir).metrics
    if metrics.exists():
        metrics.rename(metrics.with_name(f"metrics.attempt-{attempt - 1}.json"))


def claim(sessions: sessionmaker[Session], run_ids: list[str],
          profile_hash: str | None = None) -> list[tuple[Run, Attempt]]:
    """Claim runs and write the intent (an attempt in ``submitting``); returns what this process won.

    The attempt keeps what it is submitted with: the run's epoch, its script (by hash, the text
    stored once in ``scripts``), the site profile's hash and orch's version."""
    won: list[tuple[Run, Attempt]] = []
    with sessions.begin() as session:
        for run_id in run_ids:
            # An UPDATE's result is a CursorResult: it has the row count.
            result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
                update(Run).where(Run.id == run_id, Run.status.in_(SUBMITTABLE))
                .values(status=RunState.SUBMITTING, updated_at=datetime.now(timezone.utc)))
            if result.rowcount != 1:
                continue  # another process took it
            run = session.get(Run, run_id)
            assert run is not None
            session.refresh(run)
            number = (session.scalar(select(func.max(Attempt.number)).where(Attempt.run_id == run_id)) or 0) + 1
            attempt = Attempt(run_id=run_id, number=number, state=AttemptState.SUBMITTING,
                              scheduler=run.scheduler or "local",
                              job_name=job_name(run_id, number, secrets.token_hex(3)), epoch=run.epoch or 1,
                              script_hash=run.script_hash, profile_hash=profile_hash, orch_version=__version__)
            if run.script_hash and run.script is not None and session.get(ScriptText, run.script_hash) is None:
                session.add(ScriptText(sha256=run.script_hash, text=run.script))
            session.add(attempt)
            session.flush()
            won.append((run, attempt))
    return won


def submit_runs(sessions: sessionmaker[Session], executors: Executors, site: str | None = None,
                sweep: str | None = None, dry_run: bool = False, run_ids: list[str] | None = None,
                progress: Callable[[int], None] | None = None) -> SubmitReport:
    with sessions() as session:
        runs = candidates(session, site, sweep, run_ids)
    if dry_run:
        return SubmitReport(would_submit=[r.id for r in runs])
    submitted: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    deferred: list[tuple[str, str]] = []
    by_target: dict[tuple[str, str | None], list[str]] = {}
    for run in runs:
        by_target.setdefault((run.site, run.system), []).append(run.id)
    for (site_name, system), ids in by_target.items():
        executor = executors.for_site(site_name, system)
        claimed = claim(sessions, ids, executors.profile_hash(site_name, system))
        if not claimed:
            continue
        requests = []
        for run, attempt in claimed:
            run_dir = Path(run.run_dir or "")
            _archive_old_metrics(run_dir, attempt.number)
            requests.append(JobRequest(
                run_id=run.id, attempt=attempt.number, script_path=RunFiles(run_dir).script, run_dir=run_dir,
                job_name=attempt.job_name, walltime_s=run.walltime_s, nodes=run.nodes or 1,
                tasks_per_node=run.tasks_per_node or 1, queue=run.queue,
                shape_key=f"{run.nodes}x{run.tasks_per_node}:{run.queue}:{run.walltime_s}",
                share=bool(json.loads(run.spec or "{}").get("share"))))
        try:
            result: SubmitResult = executor.submit(requests)
        except Exception as exc:  # the executor itself broke: record it on these attempts
            reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            if isinstance(exc, OSError) or command_not_started(reason):
                _hand_back(sessions, claimed)  # no command ran: nothing can have been submitted
                deferred += [(run.id, reason) for run, _ in claimed]
                continue
            _record_refused(sessions, claimed, reason)
            failed += [(run.id, reason) for run, _ in claimed]
            continue
        now = datetime.now(timezone.utc)
        refused: list[tuple[Run, Attempt, str]] = []
        with sessions.begin() as session:
            for (run, attempt), job_id in zip(claimed, result.job_ids):
                name = attempt.job_name
                if job_id is not None:
                    session.execute(update(Attempt).where(Attempt.id == attempt.id)
                                    .values(job_id=job_id, state=AttemptState.PENDING, submitted_at=now))
                    session.execute(update(Run).where(Run.id == run.id)
                                    .values(status=RunState.SUBMITTED, updated_at=now))
                    submitted.append((run.id, job_id))
                elif name in result.deferred:
                    # Certainly not submitted: undo the claim, the run waits for the next submit.
                    session.execute(delete(Attempt).where(Attempt.id == attempt.id))
                    session.execute(update(Run).where(Run.id == run.id)
                                    .values(status=RunState.RETRY if attempt.number > 1 else RunState.PLANNED,
                                            updated_at=now))
                    deferred.append((run.id, result.deferred[name]))
                elif name in result.uncertain:
                    # Maybe submitted: the intent stays; `orch status` finds the job by name or
                    # hands the run back after a grace period.
                    session.execute(update(Attempt).where(Attempt.id == attempt.id)
                                    .values(reason=result.uncertain[name]))
                    deferred.append((run.id, result.uncertain[name]))
                else:
                    refused.append((run, attempt, result.refused.get(name, "not submitted (no reason given)")))
        for run, attempt, reason in refused:
            if command_not_started(reason):  # qsub or sbatch not on PATH: no scheduler saw it
                _hand_back(sessions, [(run, attempt)])
                deferred.append((run.id, reason))
                continue
            _record_refused(sessions, [(run, attempt)], reason)
            failed.append((run.id, reason))
        if progress:
            progress(sum(1 for j in result.job_ids if j is not None))
    return SubmitReport(submitted=submitted, failed=failed, deferred=deferred,
                        unreached=[(r, why) for r, why in deferred if server_unreached(why)], calls=executors.calls())


def _hand_back(sessions: sessionmaker[Session], claimed: list[tuple[Run, Attempt]]) -> None:
    """Undo these claims: the submit command never ran, so the runs wait, plannable, for the next
    submit (or a re-plan) as if it had not been tried."""
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        for run, attempt in claimed:
            session.execute(delete(Attempt).where(Attempt.id == attempt.id))
            session.execute(update(Run).where(Run.id == run.id).values(
                status=RunState.RETRY if attempt.number > 1 else RunState.PLANNED, updated_at=now))


def _record_refused(sessions: sessionmaker[Session], claimed: list[tuple[Run, Attempt]], reason: str) -> None:
    """The scheduler refused these: a launch error, retried only if the sweep's policy says so."""
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        for run, attempt in claimed:
            session.execute(update(Attempt).where(Attempt.id == attempt.id).values(
                state=AttemptState.FAILED, failure_class=FailureClass.LAUNCH_ERROR, reason=reason, finished_at=now))
            session.execute(update(Run).where(Run.id == run.id).values(
                status=run.status_after_failure(attempt.number, FailureClass.LAUNCH_ERROR), updated_at=now))
        record_results(session, [attempt.id for _, attempt in claimed])
