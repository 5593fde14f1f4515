"""Where a run's files live, and the job name it carries: shared by render, submit and follow
(kept apart from the renderer so following jobs does not load Jinja)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The folders above a run's files that orch made: ``<runs root>/<sweep>/<run id>`` (plan/record.py).
# The runs root is the user's (a symbolic link there is theirs to make); below it, a link can only
# be a job's doing, one that would show another run's files as this run's.
ORCH_MADE_DIRS = 2


@dataclass(frozen=True)
class RunFiles:
    """Where a run's files live (on the shared filesystem the job sees)."""

    run_dir: Path

    @property
    def script(self) -> Path:
        return self.run_dir / "job.sh"

    @property
    def metrics(self) -> Path:
        return self.run_dir / "metrics.json"

    @property
    def spec(self) -> Path:
        return self.run_dir / "spec.json"

    @property
    def stdout(self) -> Path:
        return self.run_dir / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.run_dir / "stderr.log"


def job_name(run_id: str, attempt: int | None = None, nonce: str | None = None) -> str:
    """``orch-<run>`` (the rendered script's name), ``orch-<run>-a<attempt>-<nonce>`` (a submission).

    An attempt's name carries a nonce because repair after a crash finds jobs by name, and the
    scheduler also keeps jobs of the same run and attempt number that are not this attempt's:
    of an earlier campaign (the same sweep planned in another ORCH_HOME or a database started
    afresh: run ids are content hashes) or of an intent handed back and numbered again. Adopting
    one of those would record a job long finished, or run the program twice."""
    name = f"orch-{run_id}" + (f"-a{attempt}" if attempt is not None else "")
    return name + (f"-{nonce}" if nonce else "")
