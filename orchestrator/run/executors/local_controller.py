"""submitit's local job controller, looking at its task twice a second instead of 24 times.

Why: every local job has a controller process from submission to end (submitit's
``Controller``, which starts the task and waits for it). submitit's loop polls the task 24
times a second, so the quick start's 12 queued runs woke the machine about 290 times a
second while one of them measured: on two cores, each wake-up takes a core from a product
running on both. Twice a second costs nothing measurable; what it delays is noticing the
task's end (by at most half a second), which no figure includes: the run's own clock stops
first and its cores are freed by the task itself.

Started by :class:`orchestrator.run.executors.local.LocalExecutor` in place of
``python -m submitit.local._local FOLDER``; everything else is submitit's.
"""

from __future__ import annotations

import sys
import typing as tp
from pathlib import Path

from submitit.local.local import Controller

MODULE = "orchestrator.run.executors.local_controller"
SUBMITIT_MODULE = "submitit.local._local"
POLLS_PER_S = 2


class QuietController(Controller):  # type: ignore[misc]
    def wait(self, freq: int = POLLS_PER_S) -> tp.Sequence[tp.Optional[int]]:
        return super().wait(freq=POLLS_PER_S)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: python -m {MODULE} SUBMITIT_FOLDER")
    QuietController(Path(sys.argv[1])).run()
