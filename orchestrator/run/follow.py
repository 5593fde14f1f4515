"""Stage 8: active jobs followed (one batched query per site per poll), classified and collected.

A state machine per attempt: submitting -> pending -> running -> completed | failed.
An attempt stuck in ``submitting`` (the submitting process died between the intent
and the job id) is repaired from the scheduler by job name, or handed back to
``planned`` when the scheduler never saw it. A failed attempt whose class the
sweep's retry policy names is retried while attempts remain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.plan.runfiles import ORCH_MADE_DIRS, RunFiles
from orchestrator.results.db.models import Attempt, Run
from orchestrator.results.db.results import record_results
from orchestrator.results.db.state import ACTIVE_ATTEMPTS as ACTIVE
from orchestrator.run.executors import JobInfo, JobState
from orchestrator.run.executors.base import SchedulerError, submit_window
from orchestrator.run.submit import Executors
from orchestrator.states import AttemptState, FailureClass, RunState

if TYPE_CHECKING:
    from orchestrator.results.ingest import IngestOutcome


def submit_grace() -> timedelta:
    """How long an intent without a job id may wait for the scheduler to show the job before the
    run is handed back to ``planned``: longer than a submit command may run (a qsub or sbatch
    given up on can still succeed late), by a margin; both come from one place
    (:func:`orchestrator.run.executors.base.submit_window`)."""
    return timedelta(seconds=submit_window()[1])


# How long a submitted job may stay unknown to the scheduler (accounting lag, a controller
# restart) before it is called lost. Long enough that a restart never fails a run. An answer
# that carries an error (the scheduler could not be asked, or its answer left the job out)
# never counts: a job is lost only when the scheduler, asked, says it does not know it.
LOST_AFTER = timedelta(seconds=float(os.environ.get("ORCH_LOST_AFTER_S", "900")))  # tests shorten it


@dataclass
class PollReport:
    ended: int = 0
    ingested: int = 0
    retried: int = 0
    repaired: int = 0
    returned_to_plan: int = 0
    unrepaired: int = 0  # intents left as they were: the scheduler could not be asked about them
    read_later: int = 0  # ended runs whose metrics wait for the next poll (POLL_READ_BYTES)
    active: int = 0
    failures: dict[str, int] = field(default_factory=dict)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _aware(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _repair_intents(session: Session, executors: Executors, report: PollReport, now: datetime) -> None:
    intents = list(session.scalars(select(Attempt)
                                   .where(Attempt.state == AttemptState.SUBMITTING, Attempt.job_id.is_(None))
                                   .with_for_update(skip_locked=True, of=Attempt)))
    by_site: dict[tuple[str, str | None], list[Attempt]] = {}
    for attempt in intents:
        by_site.setdefault((attempt.run.site, attempt.run.system), []).append(attempt)
    grace = submit_grace()
    for (site, system), attempts in by_site.items():
        executor = executors.for_site(site, system)
        try:
            found = executor.find_by_name([a.job_name for a in attempts])
        except SchedulerError as exc:
            # The scheduler could not say whether these jobs reached it: a job that did may be
            # running, so nothing is handed back this poll, however long the intent has waited.
            for attempt in attempts:
                attempt.reason = f"not repaired yet: {exc}"
            report.unrepaired += len(attempts)
            continue
        # A submitter may still be working through a site's intents (one submit command per array):
        # the grace also runs from the last submit command started there, where the executor says.
        last_submit = executor.submit_activity()
        for attempt in attempts:
            job_id = found.get(attempt.job_name)
            if job_id:
                attempt.job_id, attempt.state, attempt.reason = job_id, AttemptState.PENDING, None
                attempt.submitted_at = attempt.submitted_at or now
                attempt.run.status = RunState.SUBMITTED
                report.repaired += 1
            elif now - max(filter(None, (_aware(attempt.created_at), last_submit)), default=now) > grace:
                # The scheduler never got it: the run was not submitted after all.
                run = attempt.run
                session.execute(delete(Attempt).where(Attempt.id == attempt.id))
                has_earlier = session.scalar(select(func.count()).where(Attempt.run_id == run.id,
                                                                        Attempt.id != attempt.id))
                run.status = RunState.RETRY if has_earlier else RunState.PLANNED
                report.returned_to_plan += 1
            else:
                # The scheduler answered this time: an earlier error ("Connection refused" from qsub
                # during an outage, "not repaired yet: ...") no longer describes the intent.
                attempt.reason = (f"the scheduler answered and holds no job of this name yet: handed back to "
                                  f"be submitted {grace} after the last submit if none appears")


def _record_ends(session: Session, ended: list[tuple[Attempt, JobInfo]], report: PollReport,
                 now: datetime) -> None:
    """Record the attempts that ended in this poll: metrics of the completed ones collected in
    one batch, failures classified, retries decided, result rows written."""
    if not ended:
        return
    completed = [attempt for attempt, info in ended if info.state == JobState.COMPLETED]
    outcomes: dict[int, IngestOutcome] = {}
    if completed:
        from orchestrator.results.ingest import POLL_READ_BYTES, collect, within_read_budget

        files, later = within_read_budget([(a.id, RunFiles(Path(a.run.run_dir or "")).metrics) for a in completed])
        if later:  # left as they are (the scheduler still says they ended): the next poll reads them
            waiting = {attempt_id for attempt_id, _ in later}
            for attempt, _ in ended:
                if attempt.id in waiting:
                    attempt.reason = (f"ended; its metrics wait for the next poll (one poll reads at most "
                                      f"{POLL_READ_BYTES // 2**20} MiB of metrics files)")
            ended = [(attempt, info) for attempt, info in ended if attempt.id not in waiting]
            report.read_later += len(waiting)
        outcomes = collect(session, files, private_dirs=ORCH_MADE_DIRS)
    for attempt, info in ended:
        run = attempt.run
        attempt.exit_code = info.exit_code
        attempt.finished_at = _parse_time(info.finished_at) or now
        if attempt.elapsed_s is None and attempt.started_at is not None:
            # A scheduler that reports no elapsed time (the local executor): from start to end.
            started = _aware(attempt.started_at)
            finished = _aware(attempt.finished_at)
            if started is not None and finished is not None and finished >= started:
                attempt.elapsed_s = (finished - started).total_seconds()
        if info.state == JobState.COMPLETED:
            outcome = outcomes[attempt.id]
            if outcome.ok:
                attempt.state, run.status = AttemptState.COMPLETED, RunState.FINISHED
                attempt.reason = None  # nothing left of a pending comment
                report.ingested += 1
            else:
                attempt.state, attempt.failure_class = AttemptState.FAILED, outcome.failure
                attempt.reason = outcome.reason
        else:
            attempt.state = AttemptState.FAILED
            attempt.failure_class = (info.failure or FailureClass.FAILED).value
            attempt.reason = info.reason
            if attempt.failure_class == FailureClass.FAILED:
                # A workload that knows why it failed says so in a file (a serving run's server).
                named = _workload_failure(Path(run.run_dir or ""))
                if named is not None:
                    attempt.failure_class, attempt.reason = named
                else:  # the program's own one-line error, where it wrote one (issue 53)
                    said = program_error(RunFiles(Path(run.run_dir or "")).stderr)
                    if said:
                        attempt.reason = f"{attempt.reason or 'failed'}: {said}"
        report.ended += 1
        if attempt.state == AttemptState.FAILED:
            failure = attempt.failure_class or FailureClass.FAILED
            report.failures[failure] = report.failures.get(failure, 0) + 1
            run.status = run.status_after_failure(attempt.number, attempt.failure_class)
            report.retried += run.status == RunState.RETRY
    record_results(session, [attempt.id for attempt, _ in ended])


WORKLOAD_FAILURES = frozenset({FailureClass.SERVER_UNHEALTHY, FailureClass.SERVER_DIED, FailureClass.PORT_IN_USE})


# How much of the end of a run's stderr.log is read for the program's error line.
STDERR_TAIL_BYTES = 64 * 1024


def program_error(path: Path) -> str | None:
    """The last ``...: error: ...`` line of a job's stderr (argparse's usage errors, the
    harness's refusals: "gpt2.py: error: argument --model: invalid choice ..."), one line and
    short, or None. The file is the job's: never followed through a link, only its tail read."""
    from orchestrator.escape import one_line
    from orchestrator.safefile import RefusedFile, open_regular

    try:
        fd = open_regular(path, follow=False)
    except (OSError, RefusedFile):
        return None
    try:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - STDERR_TAIL_BYTES), os.SEEK_SET)
        tail = os.read(fd, STDERR_TAIL_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in reversed(tail.splitlines()[-40:]):
        if ": error: " in line or line.startswith("error: "):
            text = one_line(line.strip())
            return text if len(text) <= 300 else text[:300] + "..."
    return None


def _workload_failure(run_dir: Path) -> tuple[str, str] | None:
    """(class, reason) from the run's ``serving_failure.json`` (workloads/llm_serving.py), or None.
    Only the classes a workload may name are taken; a file that is not a small regular JSON
    object is ignored (the attempt stays ``failed``)."""
    import json

    path = run_dir / "serving_failure.json"
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("failure_class") not in WORKLOAD_FAILURES:
        return None
    reason = str(data.get("reason") or "")[:500]
    return str(data["failure_class"]), reason


def poll_once(sessions: sessionmaker[Session], executors: Executors) -> PollReport:
    """One round: repair intents, query every active job (batched per site), record what ended."""
    report = PollReport()
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        _repair_intents(session, executors, report, now)
    with sessions.begin() as session:
        # Row locks (PostgreSQL): a second `orch status` skips attempts this one is handling
        # instead of recording them twice. SQLite serialises writers (BEGIN IMMEDIATE).
        active = list(session.scalars(select(Attempt).where(Attempt.state.in_(ACTIVE), Attempt.job_id.is_not(None))
                                      .with_for_update(skip_locked=True, of=Attempt)))
        by_site: dict[tuple[str, str | None], list[Attempt]] = {}
        ended: list[tuple[Attempt, JobInfo]] = []
        for attempt in active:
            by_site.setdefault((attempt.run.site, attempt.run.system), []).append(attempt)
        for (site, system), attempts in by_site.items():
            infos = executors.for_site(site, system).query([a.job_id for a in attempts if a.job_id])
            for attempt in attempts:
                info = infos.get(attempt.job_id or "")
                if info is None or info.state == JobState.UNKNOWN:
                    if info is not None and info.extra.get("error"):
                        continue  # the scheduler could not be asked, or did not say: never an end
                    since = _aware(attempt.submitted_at) or _aware(attempt.created_at)
                    if since is None or now - since < LOST_AFTER or attempt.state == AttemptState.RUNNING:
                        continue  # the scheduler could not say this time: not an end
                    info = JobInfo(attempt.job_id or "", JobState.FAILED, FailureClass.LOST,
                                   reason=f"the scheduler has not known this job for {LOST_AFTER}"
                                   + (f" ({info.reason})" if info is not None and info.reason else ""))
                attempt.node_list = info.node_list or attempt.node_list
                attempt.elapsed_s = info.elapsed_s if info.elapsed_s is not None else attempt.elapsed_s
                attempt.max_rss_mb = info.max_rss_mb if info.max_rss_mb is not None else attempt.max_rss_mb
                run_count = info.extra.get("run_count")
                requeued = isinstance(run_count, int) and run_count > (attempt.run_count or 1)
                if isinstance(run_count, int):
                    attempt.run_count = max(run_count, attempt.run_count or 0)
                if info.state != JobState.PENDING:  # a queued job has not started, whatever it shows
                    # started_at is the LAST start: after a requeue (qrerun, node failure) the
                    # scheduler's elapsed time is the last run's, and the two must agree; run_count
                    # records that earlier runs happened.
                    started = _parse_time(info.started_at)
                    attempt.started_at = (started or attempt.started_at) if requeued else (
                        attempt.started_at or started)
                elif attempt.state == AttemptState.RUNNING:
                    # It ran and is queued again (qrerun, node-failure requeue): its next start is the
                    # one that counts.
                    attempt.state, attempt.run.status = AttemptState.PENDING, RunState.SUBMITTED
                    attempt.started_at = None
                if info.ended:
                    ended.append((attempt, info))
                elif info.state == JobState.RUNNING:
                    attempt.state, attempt.run.status = AttemptState.RUNNING, RunState.RUNNING
                    attempt.started_at = attempt.started_at or now
                    attempt.reason = None  # a pending comment ("Not Running: ...") no longer holds
                else:
                    attempt.reason = info.reason
        _record_ends(session, ended, report, now)
        report.active = session.scalar(select(func.count()).select_from(Attempt).where(Attempt.state.in_(ACTIVE))) or 0
    return report


def cancel_runs(sessions: sessionmaker[Session], executors: Executors, sweep: str | None = None,
                site: str | None = None, run_ids: list[str] | None = None) -> list[tuple[str, str]]:
    """Ask the schedulers to stop the active jobs of these runs (one call per site); the next
    poll records them as cancelled. Runs not yet submitted are marked cancelled at once."""
    cancelled: list[tuple[str, str]] = []
    with sessions.begin() as session:
        query = select(Attempt).join(Run).where(Attempt.state.in_(ACTIVE), Attempt.job_id.is_not(None))
        planned = select(Run).where(Run.status.in_((RunState.PLANNED, RunState.RETRY)))
        for column, value in ((Run.sweep, sweep), (Run.site, site)):
            if value:
                query, planned = query.where(column == value), planned.where(column == value)
        if run_ids is not None:
            query, planned = query.where(Run.id.in_(run_ids)), planned.where(Run.id.in_(run_ids))
        by_site: dict[tuple[str, str | None], list[Attempt]] = {}
        for attempt in session.scalars(query):
            by_site.setdefault((attempt.run.site, attempt.run.system), []).append(attempt)
        for (site_name, system), attempts in by_site.items():
            executors.for_site(site_name, system).cancel([a.job_id for a in attempts if a.job_id])
            cancelled += [(a.run_id, a.job_id or "") for a in attempts]
        for run in session.scalars(planned):
            run.status = RunState.CANCELLED
            cancelled.append((run.id, ""))
    return cancelled


INTERRUPTED = "interrupted (Ctrl-C of orch run): stopped, and planned again"


def stop_local(sessions: sessionmaker[Session], executors: Executors, sweep: str,
               site: str | None = None) -> tuple[list[str], list[str]]:
    """After a Ctrl-C of ``orch run``: stop the sweep's jobs that run on this machine (a local
    scheduler) and plan their runs again, so that running the sweep again resumes it (runs that
    finished stay finished). Jobs handed to a real scheduler are left to it, like any batch job.
    Returns (run ids stopped, job ids whose processes had not exited after the wait)."""
    stopped: list[str] = []
    lingering: list[str] = []
    now = datetime.now(timezone.utc)
    with sessions.begin() as session:
        query = (select(Attempt).join(Run).where(Attempt.state.in_(ACTIVE), Attempt.job_id.is_not(None),
                                                 Run.sweep == sweep, Attempt.scheduler == "local"))
        if site:
            query = query.where(Run.site == site)
        by_site: dict[tuple[str, str | None], list[Attempt]] = {}
        for attempt in session.scalars(query):
            by_site.setdefault((attempt.run.site, attempt.run.system), []).append(attempt)
        for (site_name, system), attempts in by_site.items():
            executor = executors.for_site(site_name, system)
            job_ids = [a.job_id for a in attempts if a.job_id]
            executor.cancel(job_ids)
            wait = getattr(executor, "wait_stopped", None)
            if wait is not None:
                lingering += wait(job_ids)
            for attempt in attempts:
                attempt.state = AttemptState.FAILED
                attempt.failure_class = FailureClass.CANCELLED
                attempt.reason = INTERRUPTED
                attempt.finished_at = now
                attempt.run.status = RunState.PLANNED
                attempt.run.updated_at = now
                stopped.append(attempt.run_id)
    return stopped, lingering
