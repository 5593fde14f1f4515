"""orch's executor for PBS Pro sites (Polaris, the AI Testbed's Groq): ``scheduler = "pbs"``.

It submits orch's rendered batch scripts through the submitit plugin's class
(:meth:`orchestrator.run.executors.pbs.plugin.PbsExecutor.submit_script`) and implements
:class:`orchestrator.run.executors.base.Executor`; what qstat says is read by
:mod:`orchestrator.run.executors.pbs.qstat`.

Every submission is a small wrapper: the ``#PBS`` directives of the rendered script
(its ``-N``/``-o``/``-e``/``-J`` are the executor's), then ``bash <script>`` in the
run directory with its output appended to the run's ``stdout.log``/``stderr.log``,
and an exit marker ``<folder>/exit/<job id>`` written at the end: the exit code, start
and end times and the hosts. A job whose history PBS has already dropped is still
known to have ended, how, where and for how long.

A job is never called gone because a successful qstat left it out (some qstat clients
drop operands of a batched query): only an explicit "Unknown Job Id" answer to a query
about that job alone says PBS does not know it, and ``orchestrator.run.follow`` still waits
its grace before calling the run lost. A server seen dropping operands is remembered in
the executor folder (``qstat-one-operand``), so later ``orch`` processes ask it one
operand per call from the start.

Options (the profile's ``executor:``, read as :class:`orchestrator.sites.schedulers.PbsOptions`,
where each is described):

``max_array_size`` (int, default 1000): longer groups are split into several arrays.
``max_queued_jobs`` (int): the server's limit on this user's queued+running jobs (subjobs count
    one each): ``submit`` asks ``qstat`` once and defers what would go over it.
``qsub_args`` (list of str): extra ``qsub`` options (e.g. ``["-W", "group_list=x"]``).
``qstat_one_operand`` (bool): ask qstat one operand per call from the start.
``commands_dir`` (str): run qsub, qstat and qdel from this directory, never whatever is first on PATH.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

from orchestrator.run.executors.base import (
    EXECUTORS,
    BatchExecutor,
    FailureClass,
    JobInfo,
    JobRequest,
    JobState,
    log_tail,
)
from orchestrator.run.executors.pbs.plugin import PbsExecutor, qsub_timeout_s
from orchestrator.run.executors.pbs.qstat import (
    FINISHED_STATES,
    RC_JOB_FINISHED,
    RC_UNKNOWN_JOB,
    PbsError,
    PbsJobId,
    _run,
    classify_exit,
    is_transient_qsub_error,
    job_info,
    parse_job_id,
    parse_qstat_json,
    pbs_command,
    qstat_jobs,
    qstat_operands,
    salvage_qstat_json,
)
from orchestrator.sites.schedulers import PbsOptions

ONE_OPERAND_FLAG = "qstat-one-operand"  # in the executor folder: this server's qstat drops operands

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


def read_exit_marker(path: Path, job_id: str) -> JobInfo | None:
    """The end of a job as its wrapper wrote it (``code start end hosts``; older markers hold
    the code alone); None when there is no marker (yet) or it cannot be read."""
    try:
        words = path.read_text().split()
        code = int(words[0])
    except (OSError, ValueError, IndexError):
        return None
    state, failure, exit_code, reason = classify_exit(code)
    info = JobInfo(job_id, state, failure, exit_code, reason=reason, extra={"source": "exit marker"})
    try:
        start, end = int(words[1]), int(words[2])
        info.elapsed_s = float(max(0, end - start))
        info.started_at = datetime.fromtimestamp(start, timezone.utc).isoformat()
        info.finished_at = datetime.fromtimestamp(end, timezone.utc).isoformat()
    except (ValueError, IndexError, OverflowError, OSError):
        pass
    if len(words) > 3 and words[3]:
        info.node_list = words[3]
    return info


def error_file_cause(error_path: Any, job_id: str, limit: int = 3) -> str | None:
    """The last lines (at most ``limit``) of a finished job's PBS error file (its ``Error_Path``,
    ``host:/path``; ``^array_index^`` filled in for a subjob), joined with "; "; None when it is
    empty or cannot be read here."""
    if not error_path:
        return None
    path = str(error_path).split(":", 1)[1] if ":" in str(error_path) and not str(error_path).startswith("/") \
        else str(error_path)
    if "^array_index^" in path:
        try:
            index = parse_job_id(job_id).index
        except ValueError:
            return None
        if index is None:
            return None
        path = path.replace("^array_index^", str(index))
    return log_tail(path, limit)


def wrapper_text(requests: Sequence[JobRequest], texts: Sequence[str], folder: Path, title: str) -> str:
    """The script qsub gets for one job (one request) or one array (``PBS_ARRAY_INDEX`` picks)."""
    from orchestrator.plan.render import RunFiles  # the run directory's log names

    lines = ["#!/bin/bash"]
    lines += [f"#PBS {d}" for d in parse_directives(texts[0])]
    lines.append(f"# {title}")
    lines.append("# Each run's script runs in its run directory, its output appended to the run's logs as it")
    lines.append("# is written (PBS would spool it until the end); the exit code, start and end times and hosts")
    lines.append("# go to the exit folder (PBS may forget the job before orch asks).")
    marker_dir = shlex.quote(str(_exit_marker_dir(folder)))
    lines.append("orch_start=$(date +%s)")

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
    lines += [
        "orch_end=$(date +%s)",
        "orch_hosts=$(awk '!seen[$0]++' \"${PBS_NODEFILE:-/dev/null}\" 2>/dev/null | paste -sd, -)",
        '[ -n "$orch_hosts" ] || orch_hosts=$(uname -n)',
        f'orch_marker={marker_dir}/"${{PBS_JOBID:-unknown}}"',
        f"mkdir -p {marker_dir} && printf '%s %s %s %s\\n' \"$code\" \"$orch_start\" \"$orch_end\" \"$orch_hosts\" "
        '>"$orch_marker.tmp" && mv -f "$orch_marker.tmp" "$orch_marker"',
    ]
    lines.append('exit "$code"')
    return "\n".join(lines) + "\n"


@EXECUTORS.register("pbs")
class OrchPbsExecutor(BatchExecutor):
    """orch's executor for PBS Pro sites."""

    options_model = PbsOptions
    options: PbsOptions
    submit_marker = "qsub-started"  # touched as each qsub starts (the name state folders already use)

    def __init__(self, folder: Path, options: Mapping[str, Any] | PbsOptions | None = None) -> None:
        super().__init__(Path(folder).resolve(), options)
        self._submitit: PbsExecutor | None = None

    def _ex(self) -> PbsExecutor:
        if self._submitit is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._submitit = PbsExecutor(self.folder / "submitit")
            self._submitit.commands_dir = self.options.commands_dir
        return self._submitit

    def _cmd(self, args: list[str]) -> subprocess.CompletedProcess:
        self._count(args[0])
        # By absolute path when the profile names the commands' directory (see pbs_command).
        return _run([pbs_command(args[0], self.options.commands_dir), *args[1:]])

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
        for attrs in jobs.values():
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
        if array:
            name = self._write_array_manifest(names)  # before qsub: find_by_name reads it after a crash
            title = f"orch job array {name}: {len(reqs)} rendered scripts of one shape (index i runs script i)"
        else:
            name = reqs[0].job_name
            title = f"orch run {reqs[0].run_id} attempt {reqs[0].attempt}: {reqs[0].script_path}"
        text = wrapper_text(reqs, texts, self.folder, title)
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        suffix = ".^array_index^" if array else ""
        args = [*[str(a) for a in self.options.qsub_args], "-N", name,
                "-o", str(logs / f"{name}{suffix}.out"), "-e", str(logs / f"{name}{suffix}.err")]
        self._count("qsub")
        self._mark_submit_started()  # see submit_activity
        try:
            job_id = self._ex().submit_script(text, args, array_size=len(reqs) if array else None)
        except Exception as exc:  # FailedJobError carries qsub's stderr
            message = str(exc).strip()
            code = getattr(getattr(exc, "__cause__", None), "returncode", None)
            if not message or code == 124:
                message = (f"qsub timed out after {qsub_timeout_s():g}s" if code == 124 or not message
                           else message)
            target = self._uncertain if is_transient_qsub_error(message) else self._refused
            for n in names:
                target[n] = message
            return [None] * len(reqs)
        if not array:
            return [job_id]
        parent = parse_job_id(job_id)
        return [str(parent.subjob(i)) for i in range(len(reqs))]

    # -- query ----------------------------------------------------------------------------

    def _marker(self, job_id: str) -> JobInfo | None:
        return read_exit_marker(_exit_marker_dir(self.folder) / job_id, job_id)

    def _one_operand(self) -> bool:
        """Whether qstat is asked one operand per call: the option, or a drop seen before (by any
        orch process using this folder)."""
        return self.options.qstat_one_operand or (self.folder / ONE_OPERAND_FLAG).exists()

    def _remember_drops(self, dropped: list[str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / ONE_OPERAND_FLAG).write_text(
            "This PBS server's qstat answered a batched `qstat -x -t -f -F json A B ...` with rc 0 and\n"
            f"without {', '.join(dropped[:5])}: orch asks it one operand per call. Delete this file to\n"
            "try batched calls again (after a qstat upgrade).\n")

    def query(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """State of every job from ONE ``qstat -x -t -f -F json`` (one per operand for a qstat
        that drops operands, and for what a batched call left unanswered).

        An UNKNOWN answer carries ``extra["error"]`` when PBS could not be asked or did not say
        (never evidence that the job is gone); without it, PBS said of this job alone that it
        does not know it (``failure`` LOST: lost once ``orchestrator.run.follow``'s grace has passed).
        """
        if not job_ids:
            return {}
        got = qstat_jobs(qstat_operands(job_ids), self._cmd, one_at_a_time=self._one_operand())
        if got.dropped:
            self._remember_drops(got.dropped)
        # Ids are matched by sequence number and index too: "6" and "6.pbs01", or a server name
        # spelled differently by qsub and qstat, are the same job.
        by_key: dict[tuple[int, bool, int | None], tuple[str, dict[str, Any]]] = {}
        for key, listed in got.jobs.items():
            try:
                parsed = parse_job_id(key)
            except ValueError:
                continue
            by_key[(parsed.seq, parsed.is_array, parsed.index)] = (key, listed)
        infos: dict[str, JobInfo] = {}
        for jid in job_ids:
            attrs = got.jobs.get(jid)
            if attrs is None:
                try:
                    parsed = parse_job_id(jid)
                    attrs = by_key.get((parsed.seq, parsed.is_array, parsed.index), (None, None))[1]
                except ValueError:
                    attrs = None
            if attrs is not None:
                info = job_info(jid, attrs)
                if info.state == JobState.FAILED and info.exit_code:
                    # The wrapper sends the program's output to the run's logs: what reached the job's
                    # own error file (-e) is the wrapper failing, before or around the program (an
                    # unwritable run directory: "stdout.log: Permission denied"). That is the cause.
                    cause = error_file_cause(attrs.get("Error_Path"), jid)
                    if cause:
                        info.reason = f"{info.reason}: {cause}" if info.reason else cause
                if info.extra.get("never_ran") or (info.ended and not info.node_list):
                    # A marker means the wrapper ran after all; it also knows where and how long.
                    marked = self._marker(jid)
                    if marked is not None and info.extra.get("never_ran"):
                        info = marked
                    elif marked is not None:
                        info.node_list = info.node_list or marked.node_list
                infos[jid] = info
                continue
            marked = self._marker(jid)
            if marked is not None:  # PBS forgot it, the wrapper wrote how it ended
                infos[jid] = marked
                continue
            try:
                operand = str(parse_job_id(jid).parent) if "[" in jid else jid
            except ValueError:
                operand = jid
            if operand in got.unknown:
                infos[jid] = JobInfo(jid, JobState.UNKNOWN, FailureClass.LOST,
                                     reason="PBS does not know this job (qstat: Unknown Job Id)",
                                     extra={"unknown_to_scheduler": True})
            else:
                error = got.errors.get(operand, "not in qstat's answer")
                infos[jid] = JobInfo(jid, JobState.UNKNOWN, reason=f"qstat: {error}", extra={"error": error})
        return infos

    # -- cancel ---------------------------------------------------------------------------

    def cancel(self, job_ids: list[str]) -> None:
        """qdel these jobs and every live copy of them (:meth:`copies`), in one call."""
        if not job_ids:
            return
        cp = self._cmd(["qdel", *dict.fromkeys([*job_ids, *self.copies(job_ids)])])
        if cp.returncode not in (0, RC_JOB_FINISHED, RC_UNKNOWN_JOB):
            bad = [ln for ln in (cp.stderr or "").splitlines() if ln.strip()
                   and "has finished" not in ln.lower() and "unknown job id" not in ln.lower()]
            if bad:
                raise PbsError("qdel failed: " + "; ".join(bad))

    def copies(self, job_ids: list[str]) -> list[str]:
        """Other live jobs that are copies of these: the same job name (one run's attempt, or one
        array of attempts) on another job, subjob for subjob. A copy is what a qsub that
        answered after orch gave up on it leaves behind; cancelling a run must stop it too.
        One ``qstat -t -f -F json`` (every live job, no operands to drop)."""
        cp = self._cmd(["qstat", "-t", "-f", "-F", "json"])
        if cp.returncode not in (0, RC_UNKNOWN_JOB):
            return []
        try:
            jobs = parse_qstat_json(cp.stdout or "")
        except ValueError:
            jobs = salvage_qstat_json(cp.stdout or "")
        live: dict[tuple[int, bool, int | None], dict[str, Any]] = {}
        for key, listed in jobs.items():
            try:
                parsed = parse_job_id(key)
            except ValueError:
                continue
            live[(parsed.seq, parsed.is_array, parsed.index)] = listed
        wanted: dict[str, set[int | None]] = {}  # job name -> subjob indices (None: the whole job)
        own: set[int] = set()
        for jid in job_ids:
            try:
                parsed = parse_job_id(jid)
            except ValueError:
                continue
            own.add(parsed.seq)
            attrs = live.get((parsed.seq, parsed.is_array, parsed.index)) or live.get((parsed.seq, True, None))
            if attrs and attrs.get("Job_Name"):
                wanted.setdefault(str(attrs["Job_Name"]), set()).add(parsed.index if parsed.is_array else None)
        out: list[str] = []
        for (seq, is_array, index), attrs in live.items():
            name = str(attrs.get("Job_Name", ""))
            if seq in own or index is not None or name not in wanted:
                continue
            if str(attrs.get("job_state", ""))[:1] in FINISHED_STATES:
                continue
            job = PbsJobId(seq, str(attrs.get("server") or "") or None, is_array)
            out += [str(job.subjob(i)) if is_array and i is not None else str(job) for i in sorted(
                wanted[name], key=lambda i: -1 if i is None else i)]
        return out

    # -- repair ---------------------------------------------------------------------------

    def find_by_name(self, job_names: list[str]) -> dict[str, str]:
        """Ids of jobs submitted under these names, from ONE ``qstat -x -f -F json`` (every job
        the server keeps); array members through the manifests written before qsub. When a
        name was submitted twice, the newest job wins (a name in two manifests: the newest job of
        either array).

        A name missing from the answer is one the server was asked about and does not know. A
        ``qstat`` that failed raises :class:`PbsError` instead: "not found" would hand the run
        back to be submitted again while its job may be running.
        """
        if not job_names:
            return {}
        members = self._array_members(set(job_names))
        cp = self._cmd(["qstat", "-x", "-f", "-F", "json"])
        if cp.returncode != 0:
            said = (cp.stderr or cp.stdout or "").strip()
            raise PbsError("qstat could not say which jobs reached PBS: "
                           + (said.splitlines()[0] if said else f"exit {cp.returncode}"))
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
                tasks = [(newest[arr].seq, str(newest[arr].subjob(index))) for arr, index in members[name]
                         if arr in newest]
                if tasks:
                    out[name] = max(tasks)[1]
            elif name in newest:
                out[name] = str(newest[name])
        return out

