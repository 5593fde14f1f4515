"""A finished sweep repeated as its next epoch: the same runs, submitted again, each with a new
attempt and so a new result row, with its time and what it ran with (``attempts.epoch``,
``script_hash``, ``profile_hash``, ``orch_version``; migration 0016).

Every run of the sweep must have ended (finished, failed, cancelled or skipped): an epoch is one
pass over the whole campaign, so the points of a series line up epoch by epoch. Each run is
resolved and rendered again from its recorded spec and its site's profile as it is now
(orchestrator/plan/again.py): a nightly campaign measures the environment the site has tonight.
A run the site can no longer do is skipped for this epoch with its reason; a skipped run the site
can now do takes part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import UserError
from orchestrator.plan.again import plan_row, render_again, spec_from_json, stage_files
from orchestrator.results.db.models import Attempt, Run
from orchestrator.states import RunState

# A run in one of these states has not ended: its epoch is not over.
NOT_OVER = (RunState.PLANNED, RunState.SUBMITTING, RunState.SUBMITTED, RunState.RUNNING, RunState.RETRY)
REPEATED = (RunState.FINISHED, RunState.FAILED, RunState.CANCELLED, RunState.SKIPPED)


@dataclass
class EpochReport:
    """What :func:`start_epoch` did."""

    sweep: str
    epoch: int
    planned: list[str] = field(default_factory=list)  # run ids waiting to be submitted in this epoch
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (run id, reason)
    rerendered: int = 0  # runs whose script differs from their last epoch's


def _not_over(runs: list[Run]) -> str:
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.status] = counts.get(run.status, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def start_epoch(sessions: sessionmaker[Session], sweep: str, sites_dirs: list[Path] | None = None,
                dry_run: bool = False) -> EpochReport:
    """Put every run of ``sweep`` into its next epoch, planned with a freshly rendered script.

    Refused, changing nothing, when the sweep has no runs or some have not ended."""
    with sessions.begin() as session:
        runs = list(session.scalars(select(Run).where(Run.sweep == sweep).order_by(Run.id)))
        if not runs:
            raise UserError(f"sweep {sweep!r} has no runs in this database: plan and run it first "
                            "(orch run SWEEP_FILE), then repeat it")
        busy = [r for r in runs if r.status in NOT_OVER]
        epoch = max(r.epoch or 1 for r in runs)
        if busy:
            raise UserError(f"sweep {sweep}: epoch {epoch} is not over ({_not_over(busy)}): wait for it "
                            f"(orch status --sweep {sweep} --watch) or cancel it (orch cancel) first")
        plans = render_again([(spec_from_json(r.id, r.spec), r.run_dir or "") for r in runs], sites_dirs)
        report = EpochReport(sweep=sweep, epoch=epoch + 1)
        last = dict(session.execute(select(Attempt.run_id, func.max(Attempt.number))
                                    .where(Attempt.run_id.in_([r.id for r in runs])).group_by(Attempt.run_id)).all())
        now = datetime.now(timezone.utc)
        staged = stage_files(plans) if not dry_run else None
        try:
            for run, plan in zip(runs, plans):
                row = plan_row(plan, run.sweep_id)
                if plan.script is None:
                    report.skipped.append((run.id, plan.resolved.skip_reason or "skipped"))
                else:
                    report.planned.append(run.id)
                    report.rerendered += row["script_hash"] != run.script_hash
                if dry_run:
                    continue
                values = {k: v for k, v in row.items() if k not in ("id", "sweep_id")}
                done = session.execute(
                    update(Run).where(Run.id == run.id, Run.status.in_(REPEATED), Run.epoch == run.epoch)
                    .values(**values, epoch=epoch + 1, epoch_first_attempt=(last.get(run.id) or 0) + 1,
                            updated_at=now).execution_options(synchronize_session=False))
                if getattr(done, "rowcount", 0) != 1:
                    raise UserError(f"sweep {sweep}: run {run.id} changed while its next epoch was being "
                                    "started (another orch?): nothing was changed; try again")
            if staged is not None:
                staged.publish()
        except BaseException:
            if staged is not None:
                staged.discard()
            raise
        if dry_run:
            session.rollback()
    return report
