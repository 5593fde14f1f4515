"""PBS Pro command outputs, read: job ids, ``qsub``'s answer, ``qstat -f -F json``, ``Exit_status``.

Pure functions (unit-tested on the real outputs in ``tests/pbs/samples/``) plus
:func:`qstat_jobs`, the one place that asks ``qstat`` about many jobs. Facts they rest on
(``shared/reference/pbs-samples/README.md``):

* ``qsub`` prints ``<seq>.<server>``; an array ``<seq>[].<server>``; its subjobs are
  ``<seq>[<i>].<server>``.
* ``qstat -x -t -f -F json ID...`` shows finished jobs too (job history must be on). It
  exits 153 if any id is unknown (stdout still JSON, without those jobs); some versions
  emit invalid JSON (odd environment values): parse defensively, fall back to one id at
  a time, then to a salvage parse of the fields orch needs.
* **A batched query can silently drop operands**: the qstat client of OpenPBS's main
  branch after 23.06.06 answers ``qstat -x -t -f -F json A B`` with rc 0 and only A's
  jobs. Absence from a successful answer is therefore never evidence that a job is gone:
  every operand must come back, the missing ones are asked again one at a time, and a
  server seen dropping is asked one operand per call from then on.
* States Q H W T M S U wait; R B run; E is exiting (not an end); F (and X for a
  finished subjob of a running array) are finished, with ``Exit_status``: 0 ok;
  1-255 the script's exit code; > 256 killed by signal (256+signal); negative codes
  are PBS's own (-29 walltime, -27/-26 memory, ...); a job deleted while queued
  ends in F with no ``Exit_status`` (substate 91).
* **An array subjob that has not run shows its array's attributes**: the parent's
  ``stime``, its current ``Exit_status`` (which changes as siblings end) and, once
  deleted, substate 70 (91 when the array has finished). Only a subjob with its own
  ``exec_host`` has its own start and outcome; one without it that is finished was
  deleted before it ran.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import typing as tp
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

from submitit.core import utils

from orchestrator.run.executors.base import FailureClass, JobInfo, JobState, SchedulerError

QSTAT_QUERY = ("-x", "-t", "-f", "-F", "json")
RC_UNKNOWN_JOB = 153  # "qstat: Unknown Job Id ..."
RC_JOB_FINISHED = 35  # "qdel: Job has finished"
# qsub failures that say the server did not answer (the job may or may not exist): not a refusal.
_TRANSIENT = ("cannot connect to server", "connection refused", "communication failure", "pbs_connect",
              "end of file", "timed out", "server is busy", "try again", "could not connect")

WAITING_STATES = frozenset("QHWTMSU")
RUNNING_STATES = frozenset("RBE")  # E: exiting, not an end yet
FINISHED_STATES = frozenset("FX")

# PBS's own (negative) Exit_status values that orch classifies specially.
EXIT_WALLTIME = -29  # JOB_EXEC_KILL_WALLTIME
EXIT_CPUT = -28  # JOB_EXEC_KILL_CPUT
EXIT_MEM = -27  # JOB_EXEC_KILL_MEM
EXIT_VMEM = -26  # JOB_EXEC_KILL_VMEM
EXIT_NODE_FAILURES = {-11: "JOB_EXEC_RERUN", -14: "JOB_EXEC_RERUN_ON_SIS_FAIL",
                      -20: "JOB_EXEC_RERUN_MS_FAIL (primary execution host failed)"}
EXIT_CHECKPOINTED = {-12: "JOB_EXEC_CHKP", -15: "JOB_EXEC_QUERST"}
SIGNAL_OFFSET = 256
CANCEL_SIGNALS = {9: "SIGKILL", 15: "SIGTERM"}  # what qdel sends (271 on OpenPBS 23.06; 265 also seen)


class PbsError(SchedulerError):
    """A PBS command failed in a way the caller must see."""


def is_transient_qsub_error(message: str) -> bool:
    """Whether qsub failed because the server did not answer (the job may exist: find it by
    name later) rather than because it refused the job (a launch error)."""
    low = message.lower()
    return any(t in low for t in _TRANSIENT)


# ======================================================================================
# Pure parsing: unit-tested on the recorded outputs
# ======================================================================================

_JOB_ID = re.compile(r"^(?P<seq>\d+)(?:\[(?P<index>\d*)\])?(?:\.(?P<server>[A-Za-z0-9_.\-]+))?$")


@dataclass(frozen=True)
class PbsJobId:
    """``6.pbs01``, ``9[].pbs01`` (an array), ``9[2].pbs01`` (one of its subjobs)."""

    seq: int
    server: str | None = None
    is_array: bool = False
    index: int | None = None

    def __str__(self) -> str:
        brackets = "" if not self.is_array else f"[{'' if self.index is None else self.index}]"
        return f"{self.seq}{brackets}" + (f".{self.server}" if self.server else "")

    @property
    def parent(self) -> "PbsJobId":
        """The array a subjob belongs to (the id itself for anything else)."""
        return PbsJobId(self.seq, self.server, self.is_array, None)

    def subjob(self, index: int) -> "PbsJobId":
        return PbsJobId(self.seq, self.server, True, index)


def parse_job_id(text: str, server: str | None = None) -> PbsJobId:
    """Parse a PBS job id; ``server`` fills in a missing ``.server`` part."""
    m = _JOB_ID.match(text.strip())
    if not m:
        raise ValueError(f"not a PBS job id: {text!r}")
    index = m.group("index")
    return PbsJobId(int(m.group("seq")), m.group("server") or server, "[" in text,
                    int(index) if index else None)


def normalize_job_id(text: str, server: str | None = None) -> str:
    """``" 6 "`` -> ``"6.<server>"``; anything unparsable is returned stripped."""
    try:
        return str(parse_job_id(text, server))
    except ValueError:
        return text.strip()


def parse_qsub_output(text: str | bytes) -> str:
    """The job id ``qsub`` printed (``6.pbs01`` or ``9[].pbs01``)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    for line in text.splitlines():
        line = line.strip()
        if _JOB_ID.match(line) and "." in line:
            return line
    raise utils.FailedSubmissionError(f"could not find a PBS job id in qsub's output {text!r}")


def parse_qstat_json(text: str | bytes) -> dict[str, dict[str, Any]]:
    """``qstat -f -F json`` output -> {job id: attributes}. Raises ValueError on invalid JSON.

    Control characters inside strings are accepted (``strict=False``); a document
    without ``"Jobs"`` (every id unknown) gives ``{}``.
    """
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not text.strip():
        return {}
    data = json.loads(text, strict=False)
    if not isinstance(data, dict):
        raise ValueError("qstat JSON is not an object")
    jobs = data.get("Jobs") or {}
    if not isinstance(jobs, dict):
        raise ValueError("qstat JSON: Jobs is not an object")
    return {str(k): v for k, v in jobs.items() if isinstance(v, dict)}


_SALVAGE_FIELDS = {
    "job_state": r'"job_state"\s*:\s*"([A-Z])"',
    "Exit_status": r'"Exit_status"\s*:\s*(-?\d+)',
    "substate": r'"substate"\s*:\s*(\d+)',
    "Job_Name": r'"Job_Name"\s*:\s*"([^"\n]*)"',
    "exec_host": r'"exec_host"\s*:\s*"([^"\n]*)"',
    "stime": r'"stime"\s*:\s*"([^"\n]*)"',
    "obittime": r'"obittime"\s*:\s*"([^"\n]*)"',
    "comment": r'"comment"\s*:\s*"([^"\n]*)"',
}


def salvage_qstat_json(text: str) -> dict[str, dict[str, Any]]:
    """Best effort for JSON that does not parse (an unescaped quote in Variable_List):
    the fields orch needs, job by job, found by pattern. ``Variable_List`` is skipped."""
    out: dict[str, dict[str, Any]] = {}
    starts = [(m.start(), m.group(1)) for m in
              re.finditer(r'^\s*"(\d+(?:\[\d*\])?(?:\.[A-Za-z0-9_.\-]+)?)"\s*:\s*\{', text, re.MULTILINE)]
    for i, (pos, jid) in enumerate(starts):
        block = text[pos:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
        block = re.sub(r'"Variable_List"\s*:\s*\{.*?\n\s*\}', "", block, flags=re.DOTALL)
        job: dict[str, Any] = {}
        for key, pattern in _SALVAGE_FIELDS.items():
            m = re.search(pattern, block)
            if m:
                job[key] = int(m.group(1)) if key in ("Exit_status", "substate") else m.group(1)
        walltime = re.search(r'"resources_used"\s*:\s*\{[^}]*"walltime"\s*:\s*"([0-9:]+)"', block, re.DOTALL)
        if walltime:
            job["resources_used"] = {"walltime": walltime.group(1)}
        if "job_state" in job:
            out[jid] = job
    return out


def parse_duration(text: Any) -> float | None:
    """``"00:00:20"`` / ``"1:02:03:04"`` / ``"20"`` -> seconds."""
    if text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    parts = str(text).strip().split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        return None
    total = 0.0
    for n in nums:
        total = total * 60 + n
    if len(nums) == 4:  # D:HH:MM:SS
        total = nums[0] * 86400 + nums[1] * 3600 + nums[2] * 60 + nums[3]
    return total


_MEM_UNITS = {"b": 1 / 2**20, "w": 8 / 2**20, "kb": 1 / 1024, "kw": 8 / 1024, "mb": 1.0, "mw": 8.0,
              "gb": 1024.0, "gw": 8192.0, "tb": 2.0**20, "tw": 8 * 2.0**20}


def parse_mem_mb(text: Any) -> float | None:
    """PBS sizes (``6332kb``, ``10gb``, ``512``) -> MiB."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?[bw])?\s*", str(text), re.IGNORECASE)
    if not m:
        return None
    return float(m.group(1)) * _MEM_UNITS[(m.group(2) or "b").lower()]


def parse_pbs_time(text: Any) -> str | None:
    """``"Sun Nov 22 08:19:19 2026"`` (the server's local time) -> ISO 8601 with offset."""
    if not text:
        return None
    try:
        value = datetime.strptime(str(text).strip(), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return value.astimezone().isoformat()


def exec_hosts(text: Any) -> str | None:
    """``"nodeA/0*2+nodeB/1"`` -> ``"nodeA,nodeB"``."""
    if not text:
        return None
    hosts: list[str] = []
    for part in str(text).split("+"):
        host = part.split("/", 1)[0].strip()
        if host and host not in hosts:
            hosts.append(host)
    return ",".join(hosts) or None


def classify_exit(exit_status: int | None) -> tuple[JobState, FailureClass | None, int | None, str | None]:
    """A finished job's ``Exit_status`` -> (state, failure class, shell exit code, reason)."""
    if exit_status is None:
        return JobState.FAILED, FailureClass.CANCELLED, None, "deleted before it ran (no Exit_status)"
    if exit_status == 0:
        return JobState.COMPLETED, None, 0, None
    if 0 < exit_status < SIGNAL_OFFSET:
        return JobState.FAILED, FailureClass.FAILED, exit_status, f"script exited with {exit_status}"
    if exit_status > SIGNAL_OFFSET:
        sig = exit_status - SIGNAL_OFFSET
        if sig in CANCEL_SIGNALS:
            return (JobState.FAILED, FailureClass.CANCELLED, 128 + sig,
                    f"killed by {CANCEL_SIGNALS[sig]} (Exit_status {exit_status}: qdel)")
        return JobState.FAILED, FailureClass.FAILED, 128 + sig, f"killed by signal {sig} (Exit_status {exit_status})"
    if exit_status == SIGNAL_OFFSET:
        return JobState.FAILED, FailureClass.FAILED, exit_status, "Exit_status 256"
    if exit_status in (EXIT_WALLTIME, EXIT_CPUT):
        what = "walltime" if exit_status == EXIT_WALLTIME else "cput"
        return JobState.FAILED, FailureClass.TIMEOUT, None, f"{what} limit exceeded (Exit_status {exit_status})"
    if exit_status in (EXIT_MEM, EXIT_VMEM):
        what = "mem" if exit_status == EXIT_MEM else "vmem"
        return (JobState.FAILED, FailureClass.OUT_OF_MEMORY, None,
                f"{what} limit exceeded (Exit_status {exit_status})")
    if exit_status in EXIT_NODE_FAILURES:
        return (JobState.FAILED, FailureClass.NODE_FAILURE, None,
                f"{EXIT_NODE_FAILURES[exit_status]} (Exit_status {exit_status})")
    if exit_status in EXIT_CHECKPOINTED:
        return (JobState.FAILED, FailureClass.PREEMPTED, None,
                f"{EXIT_CHECKPOINTED[exit_status]} (Exit_status {exit_status})")
    return JobState.FAILED, FailureClass.LAUNCH_ERROR, None, f"PBS could not run the job (Exit_status {exit_status})"


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def is_subjob(job_id: str) -> bool:
    """``9[2].pbs01`` (one subjob of an array), not ``9[].pbs01`` or ``6.pbs01``."""
    return bool(re.match(r"^\d+\[\d+\]", job_id.strip()))


def job_info(job_id: str, attrs: Mapping[str, Any]) -> JobInfo:
    """One job's ``qstat -f -F json`` attributes -> JobInfo. Never raises.

    A subjob without its own ``exec_host`` has not run: its ``stime``, ``Exit_status`` and
    ``obittime`` are its array's, so none of them is read as its own. Finished that way, it
    was deleted before it ran (``extra["never_ran"]``). A waiting job has no start time.
    """
    state_letter = str(attrs.get("job_state", "")).strip()[:1].upper()
    extra: dict[str, Any] = {"pbs_state": state_letter, "name": attrs.get("Job_Name")}
    for key in ("substate", "queue", "Exit_status", "array_id", "array_index"):
        if key in attrs:
            extra[key] = attrs[key]
    run_count = _int_or_none(attrs.get("run_count"))
    if run_count is not None and not (is_subjob(job_id) and not attrs.get("exec_host")):
        # How many times PBS started it: > 1 after a qrerun or node-failure requeue, when stime is
        # the last start and resources_used the last run (orchestrator.run.follow records both).
        extra["run_count"] = run_count
    found = attrs.get("resources_used")
    used: dict[str, Any] = found if isinstance(found, dict) else {}
    ran = bool(attrs.get("exec_host"))
    borrowed = is_subjob(job_id) and not ran  # the array's attributes shown on a subjob
    info = JobInfo(job_id=job_id, state=JobState.UNKNOWN, node_list=exec_hosts(attrs.get("exec_host")),
                   elapsed_s=parse_duration(used.get("walltime")), max_rss_mb=parse_mem_mb(used.get("mem")),
                   started_at=None if borrowed else parse_pbs_time(attrs.get("stime")), extra=extra)
    if state_letter in WAITING_STATES:
        info.state = JobState.PENDING
        info.elapsed_s = info.started_at = None
        info.reason = str(attrs.get("comment") or "") or None
    elif state_letter in RUNNING_STATES:
        info.state = JobState.RUNNING
    elif state_letter in FINISHED_STATES and (borrowed or (not ran and _int_or_none(attrs.get("substate")) == 91)):
        # Deleted before it ran: whatever Exit_status it shows is not its own.
        extra["never_ran"] = True
        shown = attrs.get("Exit_status")
        info.state, info.failure, info.exit_code = JobState.FAILED, FailureClass.CANCELLED, None
        info.reason = "deleted before it ran" + (" (array subjob" + (
            f"; its Exit_status {shown} is the array's)" if shown is not None else ")") if borrowed else "")
        info.finished_at = parse_pbs_time(attrs.get("mtime"))
    elif state_letter in FINISHED_STATES:
        exit_status = _int_or_none(attrs.get("Exit_status"))
        info.state, info.failure, info.exit_code, info.reason = classify_exit(exit_status)
        info.finished_at = parse_pbs_time(attrs.get("obittime") or attrs.get("mtime"))
    else:
        info.reason = f"unknown PBS state {state_letter!r}"
    return info


# ======================================================================================
# Asking qstat about many jobs
# ======================================================================================

def qstat_operands(job_ids: Sequence[str]) -> list[str]:
    """What to ask qstat for: each plain job, and each array once (``-t`` lists its subjobs)."""
    out: list[str] = []
    for jid in job_ids:
        try:
            parsed = parse_job_id(jid)
            operand = str(parsed.parent) if parsed.is_array else str(parsed)
        except ValueError:
            operand = jid
        if operand not in out:
            out.append(operand)
    return out


PBS_COMMANDS = ("qsub", "qstat", "qdel")


def pbs_command(name: str, commands_dir: str | os.PathLike[str] | None = None) -> str:
    """The program run for PBS command ``name``: ``commands_dir/name`` when a directory is given
    (the profile's ``executor.commands_dir``, else ``$ORCH_PBS_BIN``), else ``name`` looked up on
    PATH. An explicit directory is how a rehearsal reaches the emulator on a machine whose PBS
    install puts its own qsub first on PATH."""
    chosen = commands_dir or os.environ.get("ORCH_PBS_BIN")
    if not chosen or name not in PBS_COMMANDS:
        return name
    return os.path.join(os.path.abspath(os.fspath(chosen)), name)


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    args = [pbs_command(args[0]), *args[1:]] if args and "/" not in args[0] else args
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(args, 127, "", f"{args[0]} not found: {exc}")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"{args[0]} timed out after {timeout}s")


@dataclass
class QstatResult:
    jobs: dict[str, dict[str, Any]]
    unknown: set[str]  # operands a one-operand qstat said it does not know (rc 153)
    errors: dict[str, str]  # operand -> why nothing could be read for it
    calls: int
    # A batched call answered rc 0 without an operand that a call of its own then answered:
    # this qstat drops operands; ask it one operand per call from now on.
    dropped: list[str] = field(default_factory=list)


def qstat_jobs(operands: Sequence[str], run: tp.Callable[[list[str]], subprocess.CompletedProcess] = _run,
               one_at_a_time: bool = False) -> QstatResult:
    """Every operand's jobs from ONE ``qstat -x -t -f -F json`` (``one_at_a_time``: one call per
    operand, for a qstat known to drop operands).

    Each operand must come back: one the batched call did not answer (invalid JSON, an
    unknown id, or simply left out of an rc-0 answer) is asked again on its own. Only a
    one-operand call can say a job is unknown (``unknown``); anything else that leaves an
    operand unanswered is an error (``errors``), never evidence that the job is gone.
    """
    result = QstatResult({}, set(), {}, 0)
    if not operands:
        return result

    seen: set[tuple[int, bool, int | None]] = set()  # (seq, is array, index) of every job answered

    def add(jobs: dict[str, dict[str, Any]]) -> None:
        result.jobs.update(jobs)
        for key in jobs:
            try:
                parsed = parse_job_id(key)
            except ValueError:
                continue
            seen.add((parsed.seq, parsed.is_array, parsed.index))

    def covered(operand: str) -> bool:
        """Answered: the job itself (or the array, for an array or one of its subjobs), matched
        by sequence number and index, so "6" and "6.pbs01" are the same job."""
        if operand in result.jobs:
            return True
        try:
            parsed = parse_job_id(operand)
        except ValueError:
            return False
        return (parsed.seq, parsed.is_array, None if parsed.is_array else parsed.index) in seen

    pending = list(operands)
    batch_ok = False
    if len(operands) > 1 and not one_at_a_time:
        cp = run(["qstat", *QSTAT_QUERY, *operands])
        result.calls += 1
        try:
            add(parse_qstat_json(cp.stdout or ""))
            batch_ok = cp.returncode == 0
        except ValueError:
            pass
        pending = [op for op in operands if not covered(op)]
    for op in pending:
        single = run(["qstat", *QSTAT_QUERY, op])
        result.calls += 1
        try:
            got = parse_qstat_json(single.stdout or "")
        except ValueError:
            got = salvage_qstat_json(single.stdout or "")
        add(got)
        if covered(op):
            if batch_ok:
                result.dropped.append(op)
            continue
        if single.returncode == RC_UNKNOWN_JOB or "unknown job id" in (single.stderr or "").lower():
            result.unknown.add(op)
        else:
            result.errors[op] = ((single.stderr or "").strip() or
                                 (f"qstat exited {single.returncode}" if single.returncode else
                                  "not listed by qstat (rc 0)"))
    return result

