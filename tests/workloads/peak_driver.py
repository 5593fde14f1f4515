"""Runs the gpt2 workload's body for many configurations in one process group (under torchrun).

Why: starting torch and a gloo group costs seconds a run; tests/workloads/test_predict_memory.py
measures dozens of configurations. Each configuration is a fresh :class:`Session` parsed from
its own command line and ``workloads.gpt2.body`` (the real model, strategy, data and steps on
real tensors), which reports ``peak_tensor_bytes``; only the process and its group are shared.

Usage: ``python -m tests.workloads.peak_driver CONFIGS.json OUT_DIR`` where CONFIGS.json is a
list of argument lists; rank 0 writes OUT_DIR/<i>.json (the metrics file) or <i>.refused.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from workloads import gpt2
from workloads.harness import Refused
from workloads.harness.session import Session


def main(configs_path: str, out_dir: str) -> int:
    configs = json.loads(Path(configs_path).read_text())
    for i, argv in enumerate(configs):
        session = Session("gpt2", [*argv, "--output", str(Path(out_dir) / f"{i}.json")], training=True)
        session.ensure_process_group()  # one group for every configuration (FSDP needs one)
        try:
            gpt2.body(session)
        except Refused as exc:
            if session.is_main:
                (Path(out_dir) / f"{i}.refused").write_text(str(exc))
    return 0


def _end(code: int) -> None:
    """End as the workloads end (workloads/harness/session.py: run_workload): the group destroyed,
    then the process, without the interpreter's teardown, where gloo's and DeepSpeed's threads can
    abort a finished process ("terminate called without an active exception": seen once in a full
    test run, after every configuration's metrics were written)."""
    from workloads.harness import dist

    dist.shutdown(together=True)  # every rank done before any tears its group down
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _end(main(sys.argv[1], sys.argv[2]))
