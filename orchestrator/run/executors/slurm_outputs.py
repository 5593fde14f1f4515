"""What Slurm's commands print, read: ``sacct``, ``squeue``, ``sbatch``'s errors.

Pure functions (no subprocess), unit-tested on captured text (tests/slurm/test_sacct_parsing.py);
:mod:`orchestrator.run.executors.slurm` runs the commands and hands their output here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from orchestrator.run.executors.base import FailureClass, JobInfo, JobState

SACCT_FIELDS = ("JobID", "JobName", "State", "ExitCode", "Elapsed", "NodeList", "MaxRSS", "Reason", "Start", "End")
# Slurm reports "died by signal 53" when the batch script could not even start
# (e.g. its --output file cannot be opened: "IO setup failed").
LAUNCH_FAILURE_SIGNAL = 53
_LAUNCH_REASONS = ("launch failed", "joblaunchfailure", "batch job complete failure", "prolog", "bootfail")


def parse_exit_code(text: str | None) -> tuple[int | None, int | None]:
    """``"3:0"`` -> (3, 0); ``"0:9"`` -> (0, 9) (killed by signal 9); ``""`` -> (None, None)."""
    if not text:
        return None, None
    code, _, sig = text.strip().partition(":")
    try:
        return int(code), int(sig or 0)
    except ValueError:
        return None, None


def parse_elapsed(text: str | None) -> float | None:
    """sacct durations: ``[D-]HH:MM:SS``, ``MM:SS``, ``MM:SS.mmm``; ``INVALID``/empty -> None."""
    if not text:
        return None
    text = text.strip()
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        try:
            days = int(d)
        except ValueError:
            return None
    parts = text.split(":")
    try:
        nums = [float(p) for p in parts]
    except ValueError:
        return None
    secs = 0.0
    for n in nums:
        secs = secs * 60 + n
    if len(nums) == 1:
        secs = nums[0]
    return days * 86400 + secs


_RSS_UNITS = {"": 1 / 1024, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024, "P": 1024.0**3}


def parse_rss_mb(text: str | None) -> float | None:
    """sacct memory (``MaxRSS``): ``1240K``, ``12.5M``, ``2G``, bare number = KiB -> MiB."""
    if not text:
        return None
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGTP]?)\s*", text, re.IGNORECASE)
    if not m:
        return None
    return float(m.group(1)) * _RSS_UNITS[m.group(2).upper()]


def _time_or_none(text: str | None) -> str | None:
    if not text or text.strip() in ("Unknown", "None", "N/A", ""):
        return None
    return text.strip()


def expand_job_id(job_id: str) -> list[str]:
    """``"7_[2-4%2]"`` -> ``["7_2", "7_3", "7_4"]``; ``"7_[1,3-4]"``; anything else -> ``[job_id]``."""
    m = re.fullmatch(r"(\d+)_\[([0-9,\-]+)(?:%\d+)?\]", job_id.strip())
    if not m:
        return [job_id.strip()]
    base, spec = m.group(1), m.group(2)
    out: list[str] = []
    for piece in spec.split(","):
        if not piece:
            continue
        if "-" in piece:
            lo, _, hi = piece.partition("-")
            out.extend(f"{base}_{i}" for i in range(int(lo), int(hi) + 1))
        else:
            out.append(f"{base}_{int(piece)}")
    return out


@dataclass
class SacctRecord:
    """One job (allocation line) of sacct output, with what its steps add."""

    job_id: str
    name: str = ""
    state: str = ""
    exit_code: str = ""
    elapsed: str = ""
    node_list: str = ""
    reason: str = ""
    start: str = ""
    end: str = ""
    max_rss_mb: float | None = None
    step_states: dict[str, str] = field(default_factory=dict)  # step name -> state


def parse_sacct(text: str) -> dict[str, SacctRecord]:
    """Parse ``sacct --parsable2`` output (with its header line) into records by job id.

    Steps (``12.batch``, ``12.0``, ``7_3.extern``) are folded into their job: their
    states go to ``step_states`` and the largest MaxRSS becomes ``max_rss_mb``.
    A pending array line ``7_[2-4%2]`` yields records ``7_2``, ``7_3``, ``7_4``.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return {}
    header = lines[0].split("|")
    if "JobID" not in header:
        header = list(SACCT_FIELDS)
        body = lines
    else:
        body = lines[1:]
    records: dict[str, SacctRecord] = {}
    steps: list[tuple[str, str, dict[str, str]]] = []
    for line in body:
        cols = dict(zip(header, line.split("|")))
        raw_id = cols.get("JobID", "").strip()
        if not raw_id:
            continue
        job_part, dot, step = raw_id.partition(".")
        if dot:
            steps.append((job_part, step, cols))
            continue
        for jid in expand_job_id(job_part):
            records[jid] = SacctRecord(
                job_id=jid,
                name=cols.get("JobName", ""),
                state=cols.get("State", "").strip(),
                exit_code=cols.get("ExitCode", ""),
                elapsed=cols.get("Elapsed", ""),
                node_list=cols.get("NodeList", ""),
                reason=cols.get("Reason", ""),
                start=cols.get("Start", ""),
                end=cols.get("End", ""),
                max_rss_mb=parse_rss_mb(cols.get("MaxRSS")),
            )
    for job_part, step, cols in steps:
        rec = records.get(job_part)
        if rec is None:  # a step whose allocation line is missing: make one from it
            rec = records[job_part] = SacctRecord(job_id=job_part)
        rec.step_states[step] = cols.get("State", "").strip()
        rss = parse_rss_mb(cols.get("MaxRSS"))
        if rss is not None and (rec.max_rss_mb is None or rss > rec.max_rss_mb):
            rec.max_rss_mb = rss
    return records


_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
_RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT", "SUSPENDED", "STOPPED"}


def classify(state: str, exit_code: str = "", reason: str = "",
             step_states: Iterable[str] = ()) -> tuple[JobState, FailureClass | None, int | None, dict[str, Any]]:
    """Map one sacct job line to (state, failure class, exit code, extra). Never raises."""
    word = (state or "").split()[0].upper().rstrip("+") if (state or "").strip() else ""
    code, sig = parse_exit_code(exit_code)
    extra: dict[str, Any] = {"slurm_state": state}
    if sig:
        extra["signal"] = sig
    steps_upper = [s.split()[0].upper() for s in step_states if s.strip()]
    if word in _PENDING:
        if word == "PENDING" and any(s in _RUNNING for s in steps_upper):
            # accounting has the batch step running before it updates the job line
            return JobState.RUNNING, None, None, extra
        return JobState.PENDING, None, None, extra
    if word in _RUNNING:
        return JobState.RUNNING, None, None, extra
    if word == "COMPLETED":
        return JobState.COMPLETED, None, code if code is not None else 0, extra
    if word == "OUT_OF_MEMORY" or "OUT_OF_MEMORY" in steps_upper:
        return JobState.FAILED, FailureClass.OUT_OF_MEMORY, _shell_code(code, sig), extra
    if word in ("TIMEOUT", "DEADLINE"):
        return JobState.FAILED, FailureClass.TIMEOUT, _shell_code(code, sig), extra
    if word == "NODE_FAIL":
        return JobState.FAILED, FailureClass.NODE_FAILURE, _shell_code(code, sig), extra
    if word == "PREEMPTED":
        return JobState.FAILED, FailureClass.PREEMPTED, _shell_code(code, sig), extra
    if word in ("CANCELLED", "REVOKED"):
        return JobState.FAILED, FailureClass.CANCELLED, _shell_code(code, sig), extra
    if word in ("BOOT_FAIL", "LAUNCH_FAILED"):
        return JobState.FAILED, FailureClass.LAUNCH_ERROR, _shell_code(code, sig), extra
    if word == "FAILED":
        low = (reason or "").lower()
        if sig == LAUNCH_FAILURE_SIGNAL or (code == 0 and not sig) or any(r in low for r in _LAUNCH_REASONS):
            return JobState.FAILED, FailureClass.LAUNCH_ERROR, _shell_code(code, sig), extra
        return JobState.FAILED, FailureClass.FAILED, _shell_code(code, sig), extra
    return JobState.UNKNOWN, None, None, extra


def _shell_code(code: int | None, sig: int | None) -> int | None:
    """The exit status a shell would show: the code, or 128+signal when killed by a signal."""
    if sig:
        return 128 + sig
    return code


def job_infos(records: dict[str, SacctRecord], job_ids: Sequence[str]) -> dict[str, JobInfo]:
    """JobInfo for every asked id; ids sacct does not know come back UNKNOWN."""
    out: dict[str, JobInfo] = {}
    for jid in job_ids:
        rec = records.get(jid)
        if rec is None:
            out[jid] = JobInfo(job_id=jid, state=JobState.UNKNOWN, reason="not known to sacct")
            continue
        state, failure, code, extra = classify(rec.state, rec.exit_code, rec.reason, rec.step_states.values())
        reason = rec.reason if rec.reason and rec.reason not in ("None", "") else None
        if reason and state != JobState.PENDING:
            # sacct keeps the last pending reason after the job ran: not a reason any more.
            extra["slurm_reason"] = reason
            reason = None
        extra["name"] = rec.name
        if rec.step_states:
            extra["steps"] = dict(rec.step_states)
        out[jid] = JobInfo(
            job_id=jid,
            state=state,
            failure=failure,
            exit_code=code,
            elapsed_s=parse_elapsed(rec.elapsed) if state != JobState.PENDING else None,
            node_list=rec.node_list if rec.node_list and rec.node_list != "None assigned" else None,
            max_rss_mb=rec.max_rss_mb,
            reason=reason,
            started_at=_time_or_none(rec.start),
            finished_at=_time_or_none(rec.end) if state in (JobState.COMPLETED, JobState.FAILED) else None,
            extra=extra,
        )
    return out


def parse_squeue(text: str) -> dict[str, JobInfo]:
    """``squeue -h -r -o '%i|%T|%r|%N'`` lines -> JobInfo for jobs still waiting or running.

    Only states that are not an end are taken (an ended job's exit code is sacct's to say).
    """
    out: dict[str, JobInfo] = {}
    for line in text.splitlines():
        bits = line.split("|")
        if len(bits) < 2:
            continue
        jid, state = bits[0].strip(), bits[1].strip()
        reason = bits[2].strip() if len(bits) > 2 else ""
        nodes = bits[3].strip() if len(bits) > 3 else ""
        st, _, _, extra = classify(state)
        if st not in (JobState.PENDING, JobState.RUNNING):
            continue
        extra["source"] = "squeue"
        for one in expand_job_id(jid):
            out[one] = JobInfo(
                job_id=one,
                state=st,
                node_list=nodes or None,
                reason=reason if st == JobState.PENDING and reason not in ("", "None") else None,
                extra=dict(extra),
            )
    return out


_TRANSIENT = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted",
    "connection refused",
    "resource temporarily unavailable",
    "slurm_persist_conn",
    "communication connection failure",
    "slurmctld is not responding",
    "timed out",
    "try again",
)


def is_transient_sbatch_error(message: str) -> bool:
    """Whether sbatch failed because the controller did not answer (retry later)
    rather than because it rejected the job (a launch error)."""
    low = message.lower()
    return any(t in low for t in _TRANSIENT)


def collect_ids(text: str, latest: dict[str, str]) -> None:
    """Fold ``JobID|JobName`` lines into name -> newest base job id."""
    for line in text.splitlines():
        if "|" not in line:
            continue
        jid, _, name = line.partition("|")
        name = name.strip()
        jid = jid.strip()
        base = jid.split("_", 1)[0].split(".", 1)[0].split("+", 1)[0]
        if not base.isdigit():
            continue
        if name not in latest or int(base) > int(latest[name]):
            latest[name] = base
