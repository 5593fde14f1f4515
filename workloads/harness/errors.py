"""Errors a workload reports as one line and exit code 2 (a refusal, not a crash).

Exit code 2 is what argparse uses for a bad command line; a run the hardware or
software cannot do (fp8 on a CPU, DeepSpeed missing) is the same kind of thing:
the orchestrator classifies it as a launch error instead of a crash to retry.
"""

from __future__ import annotations

import sys
from typing import NoReturn

EXIT_REFUSED = 2


class Refused(Exception):
    """The requested run cannot be done here; the message says why in one line."""


def refuse_and_exit(workload: str, error: BaseException) -> NoReturn:
    print(f"{workload}: error: {error}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_REFUSED)
