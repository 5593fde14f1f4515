"""Slurm executor: rendered batch scripts go to ``sbatch`` through submitit.

Submission goes through :class:`submitit.SlurmExecutor` (a small subclass, so
that the batch script submitted is orch's rendered script, not submitit's
pickle runner); following and cancelling use one ``sacct`` / ``scancel`` call
for any number of jobs.

* A request alone in its shape (or with an empty ``shape_key``) is submitted as
  the rendered script itself, with ``--job-name=<JobRequest.job_name>``,
  ``--comment="orch run=<run_id> attempt=<n>"`` and ``--chdir=<run_dir>`` unless
  the script sets its own directory.
* Requests that share a non-empty ``shape_key`` go in one job array
  (``--array=0-(n-1)[%parallelism]``, split at ``max_array_size``). The array's
  script is a wrapper: it carries the ``#SBATCH`` directives of the group's first
  script (all share the shape) and, per ``$SLURM_ARRAY_TASK_ID``, ``cd``s into the
  task's directory and ``exec``s that task's own rendered script with that
  script's own ``--output``/``--error`` files. Array tasks are ``<array id>_<i>``.
  An array is named ``orch-array-<digest>``; the job names of its tasks are
  written to ``<folder>/arrays/<digest>.names`` before ``sbatch`` runs, so that
  :meth:`SlurmExecutor.find_by_name` maps names to ``<array id>_<i>`` after a
  crash between ``sbatch`` and recording the ids.

Options (the profile's ``executor:``, read as :class:`orchestrator.sites.schedulers.SlurmOptions`,
where each is described):

``array_parallelism`` (int): at most this many tasks of one array run at once.
``max_array_size`` (int, default 1000): arrays longer than this are split.
``max_queued_jobs`` (int): the scheduler's limit on queued+running jobs of this
    user (array tasks count one each). ``submit`` asks ``squeue`` once for the
    user's current count and submits only the first ``max_queued_jobs - current``
    requests; the others get ``None`` (not submitted; submit them later).
``find_window_days`` (int, default 30): how far back ``find_by_name`` looks.
``squeue_fallback`` (bool, default true): ask ``squeue`` (one call) about the jobs ``sacct``
    does not know yet (accounting lags the controller by a few seconds after a submit).

What ``sacct``, ``squeue`` and ``sbatch`` print is read in :mod:`.slurm_outputs` (pure,
unit-tested on captured text).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from orchestrator.run.executors.base import (
    EXECUTORS,
    BatchExecutor,
    FailureClass,
    JobInfo,
    JobRequest,
    JobState,
    SchedulerError,
    log_tail,
    submit_window,
)
from orchestrator.run.executors.slurm_outputs import (
    SACCT_FIELDS,
    collect_ids,
    is_transient_sbatch_error,
    job_infos,
    parse_sacct,
    parse_squeue,
)
from orchestrator.sites.schedulers import SlurmOptions

SBATCH_TIMEOUT_S = submit_window()[0]  # follow's submit grace is derived from the same window


class SlurmError(SchedulerError):
    """A Slurm command failed in a way the caller must see."""


# --------------------------------------------------------------------------------------
# Batch-script directives
# --------------------------------------------------------------------------------------

# Options the array wrapper sets itself (long name, short letter).
_WRAPPER_OWNED = {
    "job-name": "J",
    "output": "o",
    "error": "e",
    "array": "a",
    "comment": None,
    "chdir": "D",
    "open-mode": None,
}
_SHORT_TO_LONG = {v: k for k, v in _WRAPPER_OWNED.items() if v}
# Short options that take a value (so "-N 2" is one option); others are flags.
_SHORT_WITH_VALUE = set("AabcCDdeFGiJLMmNnopqStwx")


@dataclass
class Directives:
    """The ``#SBATCH`` header of a script, split into what the wrapper owns and the rest."""

    shebang: str | None
    lines: list[list[str]]  # each directive line's tokens (options the wrapper owns removed)
    owned: dict[str, str]  # long name -> value for the options in _WRAPPER_OWNED
    all_options: set[str]  # long (or short) names of every option seen


def parse_directives(text: str) -> Directives:
    """Read the ``#SBATCH`` lines at the top of a batch script (Slurm stops at the first command)."""
    shebang = None
    lines: list[list[str]] = []
    owned: dict[str, str] = {}
    seen: set[str] = set()
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if i == 0 and line.startswith("#!"):
            shebang = line[2:].strip()
            continue
        if not line or (line.startswith("#") and not line.startswith("#SBATCH")):
            continue
        if not line.startswith("#SBATCH"):
            break
        rest = line[len("#SBATCH"):]
        if rest and not rest[0].isspace():
            continue  # e.g. "#SBATCHX": not a directive
        try:
            tokens = shlex.split(rest, comments=True)
        except ValueError:
            tokens = rest.split()
        kept: list[str] = []
        j = 0
        while j < len(tokens):
            tok = tokens[j]
            name = value = None
            consumed = 1
            if tok.startswith("--"):
                name, eq, value = tok[2:].partition("=")
                if not eq:
                    value = None
                    if name in _WRAPPER_OWNED and j + 1 < len(tokens):
                        value = tokens[j + 1]
                        consumed = 2
                    elif j + 1 < len(tokens) and not tokens[j + 1].startswith("-"):
                        value = tokens[j + 1]
                        consumed = 2
            elif tok.startswith("-") and len(tok) >= 2:
                letter = tok[1]
                long = _SHORT_TO_LONG.get(letter)
                name = long or letter
                if len(tok) > 2:
                    value = tok[2:].lstrip("=")
                elif letter in _SHORT_WITH_VALUE and j + 1 < len(tokens):
                    value = tokens[j + 1]
                    consumed = 2
            if name:
                seen.add(name)
            if name in _WRAPPER_OWNED:
                owned[name] = value or ""
            else:
                kept.extend(tokens[j:j + consumed])
            j += consumed
        if kept:
            lines.append(kept)
    # Long spellings of common short options, so callers can ask "is partition set?".
    aliases = {"p": "partition", "A": "account", "N": "nodes", "t": "time", "n": "ntasks", "q": "qos"}
    seen |= {aliases[s] for s in list(seen) if s in aliases}
    return Directives(shebang=shebang, lines=lines, owned=owned, all_options=seen)


def _bash_pattern(pattern: str, job_name: str) -> str:
    """A Slurm filename pattern as a bash double-quoted string evaluated inside an array task."""
    out = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            j = i + 1
            while j < len(pattern) and pattern[j].isdigit():
                j += 1  # zero-padding width: ignored
            key = pattern[j] if j < len(pattern) else ""
            repl = {
                "%": "%",
                "j": "${SLURM_JOB_ID}",
                "A": "${SLURM_ARRAY_JOB_ID}",
                "a": "${SLURM_ARRAY_TASK_ID}",
                "x": _dq(job_name),
                "u": "${USER:-$(id -un)}",
                "N": "$(hostname -s)",
                "n": "0",
                "t": "0",
                "s": "batch",
            }.get(key)
            if repl is not None:
                out.append(repl)
                i = j + 1
                continue
        out.append(_dq(ch))
        i += 1
    return '"' + "".join(out) + '"'


def _dq(s: str) -> str:
    """Escape text for the inside of a bash double-quoted string."""
    return re.sub(r'([\\"$`])', r"\\\1", s)


def _interpreter(shebang: str | None) -> list[str]:
    if not shebang:
        return ["/bin/bash"]
    try:
        return shlex.split(shebang) or ["/bin/bash"]
    except ValueError:
        return ["/bin/bash"]


def array_wrapper_text(requests: Sequence[JobRequest], texts: Sequence[str], array_spec: str,
                       array_name: str, wrapper_log_dir: Path) -> str:
    """The batch script of one job array: the first script's directives, then one case per task.

    ``texts[i]`` is the text of ``requests[i].script_path``.
    """
    first = parse_directives(texts[0])
    out = ["#!/bin/bash"]
    out.append(f"# orch job array {array_name}: {len(requests)} rendered scripts of one shape;")
    out.append("# task i runs script i below with that script's own --output/--error.")
    for tokens in first.lines:
        out.append("#SBATCH " + " ".join(shlex.quote(t) for t in tokens))
    out.append(f"#SBATCH --array={array_spec}")
    out.append(f"#SBATCH --job-name={shlex.quote(array_name)}")
    log = str(wrapper_log_dir / "%A_%a.wrapper.log")
    out.append(f"#SBATCH --output={shlex.quote(log)}")
    out.append(f"#SBATCH --chdir={shlex.quote(str(wrapper_log_dir))}")
    out.append("")
    out.append('case "${SLURM_ARRAY_TASK_ID:-}" in')
    for i, (req, text) in enumerate(zip(requests, texts)):
        d = parse_directives(text)
        workdir = d.owned.get("chdir") or str(req.run_dir)
        default_out = "slurm-%A_%a.out"
        out_pat = d.owned.get("output") or default_out
        err_pat = d.owned.get("error")
        append = d.owned.get("open-mode", "").lower() == "append"
        redir = ">>" if append else ">"
        interp = " ".join(shlex.quote(x) for x in _interpreter(d.shebang))
        stdout = _bash_pattern(out_pat, req.job_name)
        err_part = f"2{redir}{_bash_pattern(err_pat, req.job_name)}" if err_pat else "2>&1"
        out.append(f"  {i})")
        out.append(f"    export ORCH_JOB_NAME={shlex.quote(req.job_name)} ORCH_RUN_ID={shlex.quote(req.run_id)}")
        out.append(f"    cd {shlex.quote(workdir)} || exit 97")
        out.append(f"    exec {interp} {shlex.quote(str(req.script_path))} {redir}{stdout} {err_part}")
        out.append("    ;;")
    out.append("  *)")
    out.append('    echo "orch: no script for array task ${SLURM_ARRAY_TASK_ID:-?}" >&2')
    out.append("    exit 98")
    out.append("    ;;")
    out.append("esac")
    return "\n".join(out) + "\n"


def _clean_env() -> dict[str, str]:
    """The environment without the variables of a Slurm job we may be running inside (#1782)."""
    keep = {"SLURM_CONF"}
    return {k: v for k, v in os.environ.items()
            if k in keep or not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}


# ======================================================================================
# submitit glue
# ======================================================================================


def _submitit_executor_class():
    import submitit
    from submitit.core import utils as submitit_utils

    class OrchSubmititSlurm(submitit.SlurmExecutor):
        """submitit's Slurm executor, made to submit an already rendered batch script.

        ``_make_submission_file_text`` returns the script set by :meth:`submit_script`;
        ``_make_submission_command`` adds per-job sbatch options and strips inherited
        SLURM_* variables. ``_internal_process_submissions`` is closed: the array
        path of plain submitit (``map_array``/``batch``) would build a plain
        SlurmExecutor and bypass this class.
        """

        def __init__(self, folder: Path) -> None:
            super().__init__(folder, max_num_timeout=0)
            self._script_text: str | None = None
            self._sbatch_args: list[str] = []

        def _make_submission_file_text(self, command: str, uid: str) -> str:
            if self._script_text is None:
                raise RuntimeError("OrchSubmititSlurm submits rendered scripts only (use submit_script)")
            return self._script_text

        def _make_submission_command(self, submission_file_path: Path) -> list[str]:
            unset: list[str] = []
            for k in os.environ:
                if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF":
                    unset += ["-u", k]
            # `timeout`: submitit's CommandFunction waits forever on a hung sbatch.
            return ["env", *unset, "timeout", str(SBATCH_TIMEOUT_S), "sbatch", *self._sbatch_args,
                    str(submission_file_path)]

        def _internal_process_submissions(self, delayed_submissions):  # type: ignore[override]
            raise NotImplementedError(
                "orch's Slurm executor submits rendered batch scripts (submit_script); "
                "pickled callables, map_array and batch() are not used"
            )

        def submit_script(self, text: str, sbatch_args: Sequence[str]) -> str:
            """sbatch this script text (through submitit's _submit_command); return the job id."""
            submitit_utils.JobPaths.get_first_id_independent_folder(self.folder).mkdir(parents=True, exist_ok=True)
            self._script_text = text
            self._sbatch_args = list(sbatch_args)
            try:
                # submitit prints sbatch's stderr on failure; the message reaches the
                # caller in the exception (and then in the submit result's refused) instead.
                with contextlib.redirect_stderr(io.StringIO()):
                    job = self._submit_command("")
            finally:
                self._script_text = None
                self._sbatch_args = []
            return str(job.job_id)

    return OrchSubmititSlurm


# ======================================================================================
# The executor
# ======================================================================================


@EXECUTORS.register("slurm")
class SlurmExecutor(BatchExecutor):
    """orch's executor for Slurm sites (and the sandbox cluster)."""

    options_model = SlurmOptions
    options: SlurmOptions

    def __init__(self, folder: Path, options: Mapping[str, Any] | SlurmOptions | None = None) -> None:
        super().__init__(folder, options)
        self._submitit = None

    # -- helpers ------------------------------------------------------------------------

    def _ex(self):
        if self._submitit is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._submitit = _submitit_executor_class()(self.folder / "submitit")
        return self._submitit

    def _cmd(self, name: str, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        self._count(name)
        try:
            return subprocess.run([name, *args], capture_output=True, text=True, timeout=timeout, env=_clean_env())
        except FileNotFoundError as e:
            return subprocess.CompletedProcess([name, *args], 127, "", f"{name} not found: {e}")
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess([name, *args], 124, "", f"{name} timed out after {timeout}s")

    def queued_count(self) -> int:
        """Jobs of this user the scheduler holds now (pending or running; array tasks one each)."""
        cp = self._cmd("squeue", ["-h", "-r", "--me", "-o", "%i"])
        if cp.returncode != 0:
            raise SlurmError(f"squeue failed: {cp.stderr.strip()}")
        return sum(1 for ln in cp.stdout.splitlines() if ln.strip())

    # -- submit -------------------------------------------------------------------------

    def _submit_group(self, requests: list[JobRequest]) -> list[str | None]:
        if len(requests) == 1:
            return [self._submit_single(requests[0])]
        return self._submit_array(requests)

    def _sbatch(self, text: str, args: list[str], names: Sequence[str]) -> str | None:
        self._count("sbatch")
        self._mark_submit_started()  # see submit_activity
        try:
            return self._ex().submit_script(text, args)
        except Exception as e:  # submitit raises FailedJobError/FailedSubmissionError with sbatch's stderr
            msg = str(e).strip()
            if not msg:
                cause = getattr(e, "__cause__", None)
                code = getattr(cause, "returncode", None)
                msg = (f"sbatch timed out after {SBATCH_TIMEOUT_S}s" if code == 124
                       else f"sbatch failed without a message ({type(e).__name__}, exit {code}); timed out?")
            # A timed-out sbatch may still have reached the controller: "uncertain", not "deferred".
            target = self._uncertain if is_transient_sbatch_error(msg) else self._refused
            for n in names:
                target[n] = msg
            return None

    def _extra_args(self, req: JobRequest, d: Directives) -> list[str]:
        args = []
        if req.queue and "partition" not in d.all_options:
            args.append(f"--partition={req.queue}")
        if req.account and "account" not in d.all_options:
            args.append(f"--account={req.account}")
        return args

    def _submit_single(self, req: JobRequest) -> str | None:
        try:
            text = Path(req.script_path).read_text()
        except OSError as e:
            self._refused[req.job_name] = f"cannot read {req.script_path}: {e}"
            return None
        d = parse_directives(text)
        args = [f"--job-name={req.job_name}", f"--comment=orch run={req.run_id} attempt={req.attempt}"]
        if "chdir" not in d.owned:
            Path(req.run_dir).mkdir(parents=True, exist_ok=True)
            args.append(f"--chdir={req.run_dir}")
        args += self._extra_args(req, d)
        return self._sbatch(text, args, [req.job_name])

    def _submit_array(self, reqs: list[JobRequest]) -> list[str | None]:
        names = [r.job_name for r in reqs]
        texts = self._read_scripts(reqs)
        if texts is None:
            return [None] * len(reqs)
        array_name = self._write_array_manifest(names)  # before sbatch: find_by_name reads it after a crash
        digest = array_name.removeprefix("orch-array-")
        n = len(reqs)
        spec = f"0-{n - 1}"
        par = self.options.array_parallelism
        if par:
            spec += f"%{max(1, min(int(par), n))}"
        text = array_wrapper_text(reqs, texts, spec, array_name, self._arrays_dir())
        d = parse_directives(texts[0])
        args = [f"--comment=orch array={digest} runs={n} first={reqs[0].run_id}"]
        args += self._extra_args(reqs[0], d)
        base = self._sbatch(text, args, names)
        if base is None:
            return [None] * n
        return [f"{base}_{i}" for i in range(n)]

    # -- query --------------------------------------------------------------------------

    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """State of every job from ONE sacct call (array tasks are asked through their array)."""
        if not job_ids:
            return {}
        ask: list[str] = []
        for jid in job_ids:
            base = jid.split("_", 1)[0] if "_" in jid else jid
            # A pending task of an array is only a range of its array's line (7_[2-4]):
            # ask for the array itself.
            if base not in ask:
                ask.append(base)
        cp = self._cmd("sacct", ["--parsable2", "-o", ",".join(SACCT_FIELDS), "-j", ",".join(ask)])
        if cp.returncode != 0:
            err = (cp.stderr or cp.stdout).strip()
            return {
                jid: JobInfo(job_id=jid, state=JobState.UNKNOWN, reason=f"sacct failed: {err}",
                             extra={"error": err})
                for jid in job_ids
            }
        infos = job_infos(parse_sacct(cp.stdout), job_ids)
        for jid, info in infos.items():
            if "_" in jid and info.state == JobState.FAILED and info.exit_code and info.failure == FailureClass.FAILED:
                # An array task's wrapper writes only its own failures (`exec script >stdout.log`
                # refused: "Permission denied") to its --output log: that is why the task failed
                # before its program started, not "exit 1" alone.
                cause = log_tail(self._arrays_dir() / f"{jid}.wrapper.log")
                if cause:
                    info.reason = f"{info.reason}: {cause}" if info.reason else cause
        unknown = [jid for jid, info in infos.items() if info.state == JobState.UNKNOWN]
        if unknown and self.options.squeue_fallback:
            # Accounting lags the controller by a few seconds after a submit: ask the
            # controller (one squeue call) about the jobs sacct does not know yet.
            bases = sorted({jid.split("_", 1)[0] for jid in unknown})
            cp2 = self._cmd("squeue", ["-h", "-r", "-o", "%i|%T|%r|%N", "-j", ",".join(bases)])
            if cp2.returncode == 0:
                for jid, info in parse_squeue(cp2.stdout).items():
                    if jid in infos and infos[jid].state == JobState.UNKNOWN:
                        infos[jid] = info
        return infos

    # -- cancel -------------------------------------------------------------------------

    def cancel(self, job_ids: list[str]) -> None:
        if not job_ids:
            return
        cp = self._cmd("scancel", list(job_ids))
        if cp.returncode != 0:
            bad = [ln for ln in (cp.stderr or "").splitlines()
                   if ln.strip() and "invalid job id" not in ln.lower()
                   and "already completing or completed" not in ln.lower()
                   and "job has already finished" not in ln.lower()]
            if bad:
                raise SlurmError("scancel failed: " + "; ".join(bad))

    # -- repair -------------------------------------------------------------------------

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        """Ids of jobs submitted under these names: ONE ``sacct --name`` call, and one
        ``squeue --name`` call only for names sacct does not know yet (accounting lags
        the controller by a moment). Array tasks come back as ``<array id>_<i>``. When a
        name was submitted twice, the newest job wins.

        A name missing from the answer is one Slurm was asked about and does not know. When
        Slurm could not be asked (sacct or the squeue it needed failed), this raises
        :class:`SlurmError` instead: "not found" would hand the run back to be submitted again
        while its job may be running.
        """
        if not job_names:
            return {}
        wanted = set(job_names)
        members = self._array_members(wanted)
        sched_names = sorted({arr for n in wanted for arr, _ in members.get(n, [])}
                             | {n for n in wanted if n not in members})
        days = int(self.options.find_window_days)
        cp = self._cmd("sacct", ["-X", "-n", "--parsable2", "-o", "JobID,JobName", "-S", f"now-{days}days",
                                 "-E", "now", f"--name={','.join(sched_names)}"])
        if cp.returncode != 0:
            raise SlurmError(f"sacct could not say which jobs reached Slurm: {_first_line(cp)}")
        latest: dict[str, str] = {}  # scheduler job name -> newest (array) job id
        collect_ids(cp.stdout, latest)
        missing = [s for s in sched_names if s not in latest]
        if missing:
            cp2 = self._cmd("squeue", ["-h", "-o", "%i|%j", f"--name={','.join(missing)}"])
            if cp2.returncode != 0:
                raise SlurmError(f"squeue could not say which jobs reached Slurm: {_first_line(cp2)}")
            collect_ids(cp2.stdout, latest)
        out: dict[str, str] = {}
        for name in job_names:
            if name in members:
                tasks = [(int(latest[arr]), f"{latest[arr]}_{idx}") for arr, idx in members[name] if arr in latest]
                if tasks:
                    out[name] = max(tasks)[1]
            elif name in latest:
                out[name] = latest[name]
        return out


def _first_line(cp: subprocess.CompletedProcess) -> str:
    """The first line of what a failed command said, or its exit code."""
    text = (cp.stderr or cp.stdout or "").strip()
    return text.splitlines()[0] if text else f"exit {cp.returncode}"
