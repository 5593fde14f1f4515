"""Where a run's files live, and the job name it carries: shared by render, submit and follow
(kept apart from the renderer so following jobs does not load Jinja)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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


def job_name(run_id: str, attempt: int | None = None) -> str:
    return f"orch-{run_id}" + (f"-a{attempt}" if attempt is not None else "")
