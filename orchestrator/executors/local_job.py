"""What submitit's local executor runs for a job: the rendered batch script, under bash.

Runs in the job's own process (pickled by reference, so it must stay importable and
small). The script runs in its own process group so a walltime kill stops every
process it started, not just bash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def run_batch_script(script: str, run_dir: str, marker: str | None = None) -> dict[str, Any]:
    """Run ``bash script`` in ``run_dir``; return its exit code and whether walltime stopped it."""
    started = _now()
    if marker:  # lets `orch status` find this job if the submitting process died
        import submitit

        Path(marker).parent.mkdir(parents=True, exist_ok=True)
        Path(marker).write_text(submitit.JobEnvironment().job_id)
    run_path = Path(run_dir)
    with open(run_path / "stdout.log", "ab") as out, open(run_path / "stderr.log", "ab") as err:
        process = subprocess.Popen(["bash", script], cwd=run_dir, stdout=out, stderr=err,
                                   start_new_session=True)
        stopped_by: list[str] = []

        def stop(signum: int, _frame: Any) -> None:
            # USR2 is submitit's "walltime is near"; INT/TERM are cancel or the final kill.
            stopped_by.append(signal.Signals(signum).name)
            try:
                os.killpg(process.pid, signal.SIGTERM)
                time.sleep(0.5)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        code = process.wait()
    return {
        "exit_code": code,
        "timed_out": "SIGUSR2" in stopped_by,
        "cancelled": bool(stopped_by) and "SIGUSR2" not in stopped_by,
        "started_at": started,
        "finished_at": _now(),
    }
