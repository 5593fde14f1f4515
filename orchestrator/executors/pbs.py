"""PBS Pro executor: a submitit plugin, and orch's executor for PBS sites (Polaris, Groq).

Two layers, one module:

* **The submitit plugin** (entry points group ``submitit``: ``executor`` ->
  :class:`PbsExecutor`, ``job_environment`` -> :class:`PbsJobEnvironment`). With it
  ``PbsExecutor(folder).submit(fn, ...)`` and ``map_array`` run pickled callables
  on PBS Pro like submitit's own Slurm executor: ``qsub`` (``-J 0-(n-1)`` for
  arrays), one batched ``qstat -x -t -f -F json`` per watcher update
  (:class:`PbsInfoWatcher`), ``qdel`` to cancel.
* **orch's executor** (:class:`OrchPbsExecutor`, ``scheduler = "pbs"``) submits
  orch's rendered batch scripts through the same submitit class
  (:meth:`PbsExecutor.submit_script`) and implements
  :class:`orchestrator.executors.base.Executor`.

PBS facts it is built on (``shared/reference/submitit.md`` and the real outputs in
``tests/pbs/samples/``):

* ``qsub`` prints ``<seq>.<server>``; an array ``<seq>[].<server>``; its subjobs are
  ``<seq>[<i>].<server>``. ``-J 0-(n-1)`` needs at least 2 entries, so a group of one
  is submitted as a plain job.
* ``qstat -x -f -F json ID...`` shows finished jobs too (job history must be on). It
  exits 153 if any id is unknown (stdout still JSON, without those jobs) and some
  versions emit invalid JSON (odd environment values): parse defensively and fall
  back to one id at a time, then to a salvage parse of the fields orch needs.
* States Q H W T M S U wait; R B run; E is exiting (not an end); F (and X for a
  finished subjob of a running array) are finished, with ``Exit_status``: 0 ok;
  1-255 the script's exit code; > 256 killed by signal (256+signal); negative codes
  are PBS's own (-29 walltime, -27/-26 memory, ...); a job deleted while queued
  ends in F with no ``Exit_status`` (substate 91).
* PBS does not expand ``%j`` in ``-o``/``-e`` and spools output until the end: the
  executor always gives ``-o``/``-e`` explicitly (``^array_index^`` for arrays) and
  the job's own output goes to the run directory as it is written.
* ``qrerun`` needs operator rights: a retry is a new submission (orch's retry policy
  submits a new attempt; submitit's requeue-on-timeout is not available).

Every submission is a small wrapper: the ``#PBS`` directives of the rendered script
(its ``-N``/``-o``/``-e``/``-J`` are the executor's), then ``bash <script>`` in the
run directory with its output appended to the run's ``stdout.log``/``stderr.log``,
and the exit code written to ``<folder>/exit/<job id>``: a job whose history PBS
has already dropped is still known to have ended, and how.

Options (``options`` dict, from the profile's ``executor:``):

``max_array_size`` (int, default 1000): longer groups are split into several arrays.
``max_queued_jobs`` (int): the server's limit on this user's queued+running jobs (subjobs count
    one each): ``submit`` asks ``qstat`` once and defers what would go over it.
``qsub_args`` (list of str): extra ``qsub`` options (e.g. ``["-W", "group_list=x"]``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import typing as tp
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

from submitit.core import core, job_environment, utils

from orchestrator.executors.base import (BatchExecutor, FailureClass, JobInfo, JobRequest, JobState,
                                         SchedulerError)

QSTAT_QUERY = ("-x", "-t", "-f", "-F", "json")
RC_UNKNOWN_JOB = 153  # "qstat: Unknown Job Id ..."
RC_JOB_FINISHED = 35  # "qdel: Job has finished"
QSUB_TIMEOUT_S = 180  # submitit's CommandFunction would wait forever on a hung qsub
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


def job_info(job_id: str, attrs: Mapping[str, Any]) -> JobInfo:
    """One job's ``qstat -f -F json`` attributes -> JobInfo. Never raises."""
    state_letter = str(attrs.get("job_state", "")).strip()[:1].upper()
    extra: dict[str, Any] = {"pbs_state": state_letter, "name": attrs.get("Job_Name")}
    for key in ("substate", "queue", "Exit_status", "array_id", "array_index"):
        if key in attrs:
            extra[key] = attrs[key]
    used = attrs.get("resources_used") if isinstance(attrs.get("resources_used"), dict) else {}
    info = JobInfo(job_id=job_id, state=JobState.UNKNOWN, node_list=exec_hosts(attrs.get("exec_host")),
                   elapsed_s=parse_duration(used.get("walltime")), max_rss_mb=parse_mem_mb(used.get("mem")),
                   started_at=parse_pbs_time(attrs.get("stime")), extra=extra)
    if state_letter in WAITING_STATES:
        info.state = JobState.PENDING
        info.elapsed_s = None
        info.reason = str(attrs.get("comment") or "") or None
    elif state_letter in RUNNING_STATES:
        info.state = JobState.RUNNING
    elif state_letter in FINISHED_STATES:
        exit_status = _int_or_none(attrs.get("Exit_status"))
        info.state, info.failure, info.exit_code, info.reason = classify_exit(exit_status)
        info.finished_at = parse_pbs_time(attrs.get("obittime") or attrs.get("mtime"))
    else:
        info.reason = f"unknown PBS state {state_letter!r}"
    return info


# ======================================================================================
# Batch-script directives and the wrapper
# ======================================================================================

# Options the executor sets on the qsub command line: dropped from copied directives.
_OWNED_OPTIONS = {"-N", "-o", "-e", "-J", "-j"}


def parse_directives(text: str) -> list[str]:
    """The ``#PBS`` lines of a script (PBS reads them until the first command line),
    without the options the executor owns; each as the text after ``#PBS ``."""
    kept: list[str] = []
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if i == 0 and line.startswith("#!"):
            continue
        if not line or (line.startswith("#") and not line.startswith("#PBS")):
            continue
        if not line.startswith("#PBS"):
            break
        rest = line[len("#PBS"):].strip()
        try:
            tokens = shlex.split(rest, comments=True)
        except ValueError:
            tokens = rest.split()
        out: list[str] = []
        j = 0
        while j < len(tokens):
            tok = tokens[j]
            opt = tok[:2] if tok.startswith("-") else None
            takes_value = opt is not None and len(tok) == 2 and j + 1 < len(tokens)
            if opt in _OWNED_OPTIONS:
                j += 2 if takes_value else 1
                continue
            out.append(tok)
            j += 1
        if out:
            kept.append(" ".join(shlex.quote(t) for t in out))
    return kept


def _exit_marker_dir(folder: Path) -> Path:
    return folder / "exit"


def wrapper_text(requests: Sequence[JobRequest], texts: Sequence[str], folder: Path, title: str) -> str:
    """The script qsub gets for one job (one request) or one array (``PBS_ARRAY_INDEX`` picks)."""
    from orchestrator.render import RunFiles  # the run directory's log names

    lines = ["#!/bin/bash"]
    lines += [f"#PBS {d}" for d in parse_directives(texts[0])]
    lines.append(f"# {title}")
    lines.append("# Each run's script runs in its run directory, its output appended to the run's logs as it")
    lines.append("# is written (PBS would spool it until the end); the exit code goes to the exit folder.")
    marker_dir = shlex.quote(str(_exit_marker_dir(folder)))

    def run_lines(req: JobRequest, indent: str) -> list[str]:
        files = RunFiles(Path(req.run_dir))
        return [
            f"{indent}export ORCH_JOB_NAME={shlex.quote(req.job_name)}",
            f"{indent}cd {shlex.quote(str(req.run_dir))} || exit 97",
            f"{indent}bash {shlex.quote(str(req.script_path))} >>{shlex.quote(str(files.stdout))} "
            f"2>>{shlex.quote(str(files.stderr))}",
            f"{indent}code=$?",
        ]

    if len(requests) == 1:
        lines += run_lines(requests[0], "")
    else:
        lines.append('case "${PBS_ARRAY_INDEX:-}" in')
        for i, req in enumerate(requests):
            lines.append(f"  {i})")
            lines += run_lines(req, "    ")
            lines.append("    ;;")
        lines += ["  *)", '    echo "orch: no script for array index ${PBS_ARRAY_INDEX:-?}" >&2', "    exit 98",
                  "    ;;", "esac"]
    lines.append(f"mkdir -p {marker_dir} && echo \"$code\" > {marker_dir}/\"${{PBS_JOBID:-unknown}}\"")
    lines.append('exit "$code"')
    return "\n".join(lines) + "\n"


def _digest(names: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(names).encode()).hexdigest()[:16]


# ======================================================================================
# The submitit plugin
# ======================================================================================

_SUBMITIT_STATE = {
    JobState.PENDING: "PENDING",
    JobState.RUNNING: "RUNNING",
    JobState.COMPLETED: "COMPLETED",
    JobState.UNKNOWN: "UNKNOWN",
}
# submitit's state words (Slurm's); PREEMPTED is not used: submitit reads it as "not done",
# and on PBS a checkpointed-and-killed job has ended (nothing requeues it in place).
_SUBMITIT_FAILURE = {
    FailureClass.TIMEOUT: "TIMEOUT",
    FailureClass.OUT_OF_MEMORY: "OUT_OF_MEMORY",
    FailureClass.CANCELLED: "CANCELLED",
    FailureClass.NODE_FAILURE: "NODE_FAIL",
}


def _submitit_state(info: JobInfo) -> str:
    if info.state == JobState.FAILED:
        return _SUBMITIT_FAILURE.get(info.failure or FailureClass.FAILED, "FAILED")
    return _SUBMITIT_STATE[info.state]


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


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        return subprocess.CompletedProcess(args, 127, "", f"{args[0]} not found: {exc}")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(args, 124, "", f"{args[0]} timed out after {timeout}s")


@dataclass
class QstatResult:
    jobs: dict[str, dict[str, Any]]
    unknown: set[str]  # operands qstat said it does not know (rc 153)
    errors: dict[str, str]  # operand -> why nothing could be read for it
    calls: int


def qstat_jobs(operands: Sequence[str], run: tp.Callable[[list[str]], subprocess.CompletedProcess] = _run
               ) -> QstatResult:
    """ONE ``qstat -x -t -f -F json`` for every operand; one call per operand only for those the
    batched call could not answer (invalid JSON, unknown ids)."""
    result = QstatResult({}, set(), {}, 0)
    if not operands:
        return result
    cp = run(["qstat", *QSTAT_QUERY, *operands])
    result.calls += 1
    bad_json = False
    try:
        result.jobs.update(parse_qstat_json(cp.stdout or ""))
    except ValueError:
        bad_json = True

    def covered(operand: str) -> bool:
        if operand in result.jobs:
            return True
        try:
            parsed = parse_job_id(operand)
        except ValueError:
            return False
        if parsed.is_array:  # an array is answered when its parent is
            return str(parsed.parent) in result.jobs
        return False

    if cp.returncode == 0 and not bad_json:
        missing = [op for op in operands if not covered(op)]
        for op in missing:  # rc 0 but not listed: qstat -x without history, say
            result.errors[op] = "not listed by qstat"
        return result
    if len(operands) == 1 and cp.returncode == RC_UNKNOWN_JOB:
        result.unknown.add(operands[0])
        return result
    # Fall back one operand at a time for whatever the batched call did not answer.
    for op in [op for op in operands if not covered(op)]:
        single = run(["qstat", *QSTAT_QUERY, op])
        result.calls += 1
        try:
            got = parse_qstat_json(single.stdout or "")
        except ValueError:
            got = salvage_qstat_json(single.stdout or "")
        result.jobs.update(got)
        if covered(op):
            continue
        if single.returncode == RC_UNKNOWN_JOB or "unknown job id" in (single.stderr or "").lower():
            result.unknown.add(op)
        else:
            result.errors[op] = (single.stderr or single.stdout or f"qstat exited {single.returncode}").strip()
    return result


class PbsInfoWatcher(core.InfoWatcher):
    """One batched ``qstat -x -t -f -F json`` per update for every registered, unfinished job."""

    def _make_command(self) -> list[str] | None:
        operands = qstat_operands(sorted(self._registered - self._finished))
        if not operands:
            return None
        return ["qstat", *QSTAT_QUERY, *operands]

    def update(self) -> None:
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        operands = command[len(QSTAT_QUERY) + 1:]
        got = qstat_jobs(operands)
        self._info_dict.update(self._infos(got))
        self._last_status_check = core._time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    @staticmethod
    def _infos(got: QstatResult) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for jid, attrs in got.jobs.items():
            info = job_info(jid, attrs)
            out[jid] = {"State": _submitit_state(info), "NodeList": info.node_list or "",
                        "ExitStatus": str(attrs.get("Exit_status", "")), "JobState": str(attrs.get("job_state", ""))}
        for jid in got.unknown:
            out.setdefault(jid, {"State": "UNKNOWN"})
        return out

    def read_info(self, string: bytes | str) -> dict[str, dict[str, str]]:
        """``qstat -f -F json`` text -> {job id: {"State": ..., "NodeList": ...}}."""
        try:
            jobs = parse_qstat_json(string)
        except ValueError:
            jobs = salvage_qstat_json(string.decode() if isinstance(string, bytes) else string)
        return self._infos(QstatResult(jobs, set(), {}, 1))

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        info = self.get_info(job_id, mode=mode)
        return info.get("State") or "UNKNOWN"


class PbsJob(core.Job[core.R]):
    _cancel_command = "qdel"
    watcher = PbsInfoWatcher(delay_s=600)


class PbsJobEnvironment(job_environment.JobEnvironment):
    """What a submitit job sees on a PBS node (``SUBMITIT_EXECUTOR=pbs``)."""

    _env = {
        "job_id": "PBS_JOBID",
        "num_tasks": "PMI_SIZE",
        "num_nodes": "ORCH_PBS_NUM_NODES",
        "node": "ORCH_PBS_NODE",
        "global_rank": "PMI_RANK",
        "local_rank": "PMI_LOCAL_RANK",
        "array_job_id": "PBS_ARRAY_ID",
        "array_task_id": "PBS_ARRAY_INDEX",
    }

    @property
    def job_id(self) -> str:
        # PBS_JOBID is already the subjob's full id (9[2].server): the paths use it as is.
        return os.environ[self._env["job_id"]]

    @property
    def hostnames(self) -> list[str]:
        nodefile = os.environ.get("PBS_NODEFILE")
        hosts: list[str] = []
        if nodefile and Path(nodefile).is_file():
            for line in Path(nodefile).read_text().splitlines():
                if line.strip() and line.strip() not in hosts:
                    hosts.append(line.strip())
        return hosts or [self.hostname]

    @property
    def num_nodes(self) -> int:
        return len(self.hostnames)

    @property
    def node(self) -> int:
        hosts = self.hostnames
        return hosts.index(self.hostname) if self.hostname in hosts else 0

    def _requeue(self, countdown: int) -> None:
        raise utils.UncompletedJobError(
            "PBS jobs are not requeued in place (qrerun needs operator rights): resubmit instead")


class PbsExecutor(core.PicklingExecutor):
    """submitit executor for PBS Pro (plugin name ``pbs``).

    Parameters (``update_parameters``): ``job_name``, ``timeout_min``, ``nodes``, ``ncpus``,
    ``ngpus``, ``mpiprocs``, ``mem_gb``, ``select`` (extra chunk resources, e.g.
    ``system=polaris``), ``queue``, ``account``, ``place``, ``filesystems``,
    ``directives`` (more ``#PBS`` lines), ``setup`` (shell lines before the command),
    ``qsub_args`` (extra qsub options).
    """

    job_class = PbsJob

    def __init__(self, folder: str | Path, max_num_timeout: int = 0, max_pickle_size_gb: float = 1.0,
                 python: str | None = None) -> None:
        super().__init__(folder, max_num_timeout=max_num_timeout, max_pickle_size_gb=max_pickle_size_gb)
        self.python = shlex.quote(sys.executable) if python is None else python
        self.parameters.setdefault("timeout_min", 5)
        self._script_text: str | None = None  # orch: an already rendered script
        self._qsub_args: list[str] = []
        self._map_count: int | None = None

    @classmethod
    def _equivalence_dict(cls) -> core.EquivalenceDict:
        return {"name": "job_name", "timeout_min": "timeout_min", "mem_gb": "mem_gb", "nodes": "nodes",
                "cpus_per_task": "ncpus", "gpus_per_node": "ngpus", "tasks_per_node": "mpiprocs"}

    @classmethod
    def _valid_parameters(cls) -> set[str]:
        return {"job_name", "timeout_min", "nodes", "ncpus", "ngpus", "mpiprocs", "mem_gb", "select", "queue",
                "account", "place", "filesystems", "directives", "setup", "qsub_args"}

    def _internal_update_parameters(self, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - self._valid_parameters())
        if unknown:
            raise ValueError(f"Unavailable parameter(s): {unknown}; valid: {sorted(self._valid_parameters())}")
        super()._internal_update_parameters(**kwargs)

    @classmethod
    def affinity(cls) -> int:
        return -1 if shutil.which("qsub") is None else 2

    # -- the scripts -------------------------------------------------------------------

    def _directives(self) -> list[str]:
        p = self.parameters
        chunk = [str(p.get("nodes", 1))]
        for key in ("ncpus", "ngpus", "mpiprocs"):
            if p.get(key):
                chunk.append(f"{key}={int(p[key])}")
        if p.get("mem_gb"):
            chunk.append(f"mem={int(p['mem_gb'])}gb")
        if p.get("select"):
            chunk.append(str(p["select"]))
        minutes = float(p.get("timeout_min", 5))
        seconds = max(1, int(round(minutes * 60)))
        out = [f"-N {p.get('job_name', 'submitit')}", "-l select=" + ":".join(chunk),
               f"-l walltime={seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"]
        for key, flag in (("place", "-l place="), ("filesystems", "-l filesystems="), ("queue", "-q "),
                          ("account", "-A ")):
            if p.get(key):
                out.append(f"{flag}{p[key]}")
        out += [str(d) for d in p.get("directives", [])]
        return out

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        if self._script_text is not None:
            return self._script_text
        paths = utils.JobPaths(self.folder)
        stdout = str(paths.stdout).replace("%j", "${PBS_JOBID}").replace("%t", "0")
        stderr = str(paths.stderr).replace("%j", "${PBS_JOBID}").replace("%t", "0")
        lines = ["#!/bin/bash", *(f"#PBS {d}" for d in self._directives()), "",
                 "# PBS spools -o/-e until the end and does not expand %j: write the logs directly.",
                 f'exec >>"{stdout}" 2>>"{stderr}"', "export SUBMITIT_EXECUTOR=pbs"]
        lines += [str(s) for s in self.parameters.get("setup", [])]
        lines += [command, ""]
        return "\n".join(lines)

    def _pbs_logs(self, uid: str) -> tuple[str, str]:
        logs = self.folder / "pbs-logs"
        logs.mkdir(parents=True, exist_ok=True)
        suffix = ".^array_index^" if self._map_count else ""
        return str(logs / f"{uid}{suffix}.out"), str(logs / f"{uid}{suffix}.err")

    def _make_submission_command(self, submission_file_path: Path) -> list[str]:
        prefix = ["timeout", str(QSUB_TIMEOUT_S)] if shutil.which("timeout") else []
        if self._script_text is not None:  # orch's rendered script: the caller gave -N/-o/-e
            args = [*prefix, "qsub", *self._qsub_args]
        else:
            uid = submission_file_path.stem.lstrip(".").replace("submission_file_", "")
            out, err = self._pbs_logs(uid)
            args = [*prefix, "qsub", *[str(a) for a in self.parameters.get("qsub_args", [])], "-o", out, "-e", err]
        if self._map_count:
            args += ["-J", f"0-{self._map_count - 1}"]
        return [*args, str(submission_file_path)]

    @staticmethod
    def _get_job_id_from_submission_command(string: bytes | str) -> str:
        return parse_qsub_output(string)

    def _num_tasks(self) -> int:
        return 1

    @property
    def _submitit_command_str(self) -> str:
        return " ".join([self.python, "-u -m submitit.core._submit", shlex.quote(str(self.folder))])

    def _internal_process_submissions(self, delayed_submissions: list[utils.DelayedSubmission]
                                      ) -> list[core.Job[Any]]:
        if len(delayed_submissions) == 1:
            return super()._internal_process_submissions(delayed_submissions)
        # An array (-J 0-(n-1), n >= 2): pickles first, then one qsub; subjob i runs pickle i.
        folder = utils.JobPaths.get_first_id_independent_folder(self.folder)
        folder.mkdir(parents=True, exist_ok=True)
        pickle_paths = []
        for d in delayed_submissions:
            pickle_path = folder / f"{uuid.uuid4().hex}.pkl"
            d.set_timeout(float(self.parameters.get("timeout_min", 5)), self.max_num_timeout)
            d.dump(pickle_path)
            pickle_paths.append(pickle_path)
        self._throttle()
        self._map_count = len(delayed_submissions)
        try:
            first = self._submit_command(self._submitit_command_str)
        finally:
            self._map_count = None
        parent = parse_job_id(first.job_id)
        jobs: list[core.Job[Any]] = [PbsJob(folder=self.folder, job_id=str(parent.subjob(i)))
                                     for i in range(len(delayed_submissions))]
        for job, pickle_path in zip(jobs, pickle_paths):
            job.paths.move_temporary_file(pickle_path, "submitted_pickle")
        return jobs

    # -- orch's entry: a rendered script -------------------------------------------------

    def submit_script(self, text: str, qsub_args: Sequence[str], array_size: int | None = None) -> str:
        """qsub this script text (through submitit's _submit_command); return the job id qsub printed."""
        utils.JobPaths.get_first_id_independent_folder(self.folder).mkdir(parents=True, exist_ok=True)
        self._script_text = text
        self._qsub_args = list(qsub_args)
        self._map_count = array_size if array_size and array_size >= 2 else None
        try:
            job = self._submit_command("")
        finally:
            self._script_text, self._qsub_args, self._map_count = None, [], None
        return str(job.job_id)


# ======================================================================================
# orch's executor
# ======================================================================================


class OrchPbsExecutor(BatchExecutor):
    """orch's executor for PBS Pro sites."""

    scheduler = "pbs"

    def __init__(self, folder: Path, options: dict[str, Any] | None = None) -> None:
        super().__init__(Path(folder).resolve(), options)
        self._submitit: PbsExecutor | None = None

    def _ex(self) -> PbsExecutor:
        if self._submitit is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._submitit = PbsExecutor(self.folder / "submitit")
        return self._submitit

    def _cmd(self, args: list[str]) -> subprocess.CompletedProcess:
        self._count(args[0])
        return _run(args)

    # -- submit ---------------------------------------------------------------------------

    def queued_count(self) -> int:
        """Jobs of this user the server holds now, queued or running (array subjobs one each)."""
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
        cp = self._cmd(["qstat", "-t", "-f", "-F", "json"])
        if cp.returncode not in (0, RC_UNKNOWN_JOB):
            raise PbsError(f"qstat failed: {(cp.stderr or cp.stdout).strip()}")
        try:
            jobs = parse_qstat_json(cp.stdout or "")
        except ValueError:
            jobs = salvage_qstat_json(cp.stdout or "")
        count = 0
        for jid, attrs in jobs.items():
            owner = str(attrs.get("Job_Owner", ""))
            if user and owner and owner.split("@", 1)[0] != user:
                continue
            if attrs.get("array") == "True":
                continue  # the subjobs are counted
            if str(attrs.get("job_state", ""))[:1] not in FINISHED_STATES:
                count += 1
        return count

    def _submit_group(self, reqs: list[JobRequest]) -> list[str | None]:
        names = [r.job_name for r in reqs]
        texts = self._read_scripts(reqs)
        if texts is None:
            return [None] * len(reqs)
        array = len(reqs) >= 2
        digest = _digest(names)
        if array:
            name = f"orch-array-{digest}"
            manifest = self.folder / "arrays" / f"{digest}.names"
            manifest.parent.mkdir(parents=True, exist_ok=True)
            # The names go to disk before qsub: find_by_name reads them after a crash.
            tmp = manifest.with_suffix(".tmp")
            tmp.write_text("\n".join(names) + "\n")
            os.replace(tmp, manifest)
            title = f"orch job array {name}: {len(reqs)} rendered scripts of one shape (index i runs script i)"
        else:
            name = reqs[0].job_name
            title = f"orch run {reqs[0].run_id} attempt {reqs[0].attempt}: {reqs[0].script_path}"
        text = wrapper_text(reqs, texts, self.folder, title)
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        suffix = ".^array_index^" if array else ""
        args = [*[str(a) for a in self.options.get("qsub_args", [])], "-N", name,
                "-o", str(logs / f"{name}{suffix}.out"), "-e", str(logs / f"{name}{suffix}.err")]
        self._count("qsub")
        try:
            job_id = self._ex().submit_script(text, args, array_size=len(reqs) if array else None)
        except Exception as exc:  # FailedJobError carries qsub's stderr
            message = str(exc).strip()
            code = getattr(getattr(exc, "__cause__", None), "returncode", None)
            if not message or code == 124:
                message = (f"qsub timed out after {QSUB_TIMEOUT_S}s" if code == 124 or not message
                           else message)
            target = self.uncertain if is_transient_qsub_error(message) else self.submit_errors
            for n in names:
                target[n] = message
            return [None] * len(reqs)
        if not array:
            return [job_id]
        parent = parse_job_id(job_id)
        return [str(parent.subjob(i)) for i in range(len(reqs))]

    # -- query ----------------------------------------------------------------------------

    def _marker(self, job_id: str) -> int | None:
        path = _exit_marker_dir(self.folder) / job_id
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """State of every job from ONE ``qstat -x -t -f -F json`` (fallbacks aside)."""
        if not job_ids:
            return {}

        def run(args: list[str]) -> subprocess.CompletedProcess:
            return self._cmd(args)

        got = qstat_jobs(qstat_operands(job_ids), run)
        # Ids are matched by sequence number and index too: "6" and "6.pbs01", or a server name
        # spelled differently by qsub and qstat, are the same job.
        by_key: dict[tuple[int, bool, int | None], dict[str, Any]] = {}
        for key, attrs in got.jobs.items():
            try:
                parsed = parse_job_id(key)
            except ValueError:
                continue
            by_key[(parsed.seq, parsed.is_array, parsed.index)] = attrs
        infos: dict[str, JobInfo] = {}
        for jid in job_ids:
            attrs = got.jobs.get(jid)
            if attrs is None:
                try:
                    parsed = parse_job_id(jid)
                    attrs = by_key.get((parsed.seq, parsed.is_array, parsed.index))
                except ValueError:
                    attrs = None
            if attrs is not None:
                infos[jid] = job_info(jid, attrs)
                continue
            code = self._marker(jid)
            if code is not None:  # PBS forgot it, the wrapper wrote how it ended
                state, failure, exit_code, reason = classify_exit(code)
                infos[jid] = JobInfo(jid, state, failure, exit_code, reason=reason, extra={"source": "exit marker"})
                continue
            try:
                operand = str(parse_job_id(jid).parent) if "[" in jid else jid
            except ValueError:
                operand = jid
            if operand in got.unknown:
                infos[jid] = JobInfo(jid, JobState.FAILED, FailureClass.LOST,
                                     reason="PBS does not know this job (qstat: Unknown Job Id)")
            else:
                error = got.errors.get(operand, "not in qstat's answer")
                infos[jid] = JobInfo(jid, JobState.UNKNOWN, reason=f"qstat: {error}", extra={"error": error})
        return infos

    # -- cancel ---------------------------------------------------------------------------

    def cancel(self, job_ids: list[str]) -> None:
        if not job_ids:
            return
        cp = self._cmd(["qdel", *job_ids])
        if cp.returncode not in (0, RC_JOB_FINISHED, RC_UNKNOWN_JOB):
            bad = [ln for ln in (cp.stderr or "").splitlines() if ln.strip()
                   and "has finished" not in ln.lower() and "unknown job id" not in ln.lower()]
            if bad:
                raise PbsError("qdel failed: " + "; ".join(bad))

    # -- repair ---------------------------------------------------------------------------

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        """Ids of jobs submitted under these names, from ONE ``qstat -x -f -F json`` (every job
        the server keeps); array members through the manifests written before qsub. When a
        name was submitted twice, the newest job wins."""
        if not job_names:
            return {}
        wanted = set(job_names)
        members: dict[str, tuple[str, int]] = {}
        adir = self.folder / "arrays"
        if adir.is_dir():
            for manifest in adir.glob("*.names"):
                try:
                    names = manifest.read_text().splitlines()
                except OSError:
                    continue
                for i, name in enumerate(names):
                    if name in wanted:
                        members[name] = (f"orch-array-{manifest.stem}", i)
        cp = self._cmd(["qstat", "-x", "-f", "-F", "json"])
        try:
            jobs = parse_qstat_json(cp.stdout or "")
        except ValueError:
            jobs = salvage_qstat_json(cp.stdout or "")
        newest: dict[str, PbsJobId] = {}
        for jid, attrs in jobs.items():
            try:
                parsed = parse_job_id(jid)
            except ValueError:
                continue
            if parsed.is_array and parsed.index is not None:
                continue  # subjobs carry the array's name
            name = str(attrs.get("Job_Name", ""))
            if name and (name not in newest or parsed.seq > newest[name].seq):
                newest[name] = parsed
        out: dict[str, str] = {}
        for name in job_names:
            if name in members:
                array_name, index = members[name]
                if array_name in newest:
                    out[name] = str(newest[array_name].subjob(index))
            elif name in newest:
                out[name] = str(newest[name])
        return out

