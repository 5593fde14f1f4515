"""``python -m orchestrator.sites.vendors.capture --log FILE -- COMMAND...``: run a vendor tool, keep its output.

The tool's standard output and error go, line by line and merged, both to this process's
standard output (the job's log, as without the wrapper) and to ``FILE``, which the adapter reads
afterwards. ``--expand`` expands ``$VAR`` in the command's words at run time (a vendor
command that names the job's own id, e.g. Graphcore's ``--vipu-partition=slurm_${SLURM_JOBID}``).
The exit status is the tool's, so a failed tool fails the job before the adapter
runs. Standard library only: it runs in the vendor's environment.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.sites.vendors.capture", allow_abbrev=False,
                                     description="Run COMMAND; copy its merged output to --log and stdout.")
    parser.add_argument("--log", required=True, metavar="FILE")
    parser.add_argument("--expand", action="store_true",
                        help="expand $VAR and ${VAR} in COMMAND's words from the job's environment "
                             "(the script passes them quoted, so the shell does not)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    if args.expand:
        command = [os.path.expandvars(word) for word in command]
    with open(args.log, "ab") as log:
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as exc:
            print(f"orch capture: cannot start {command[0]}: {exc}", file=sys.stderr)
            return 127
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            log.write(line)
            log.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
