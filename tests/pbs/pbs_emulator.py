"""A PBS Pro command emulator for the tests: ``qsub``, ``qstat``, ``qdel`` (and the job runner).

No PBS server can be installed on the test machines, so the PBS executor is tested
against this emulator. It follows the real formats recorded from OpenPBS 23.06.06
in ``tests/pbs/samples/`` (``shared/reference/pbs-samples``):

* ``qsub`` prints ``<seq>.<server>``, arrays ``<seq>[].<server>``; subjobs are
  ``<seq>[<i>].<server>``; ``-J`` needs at least 2 entries; ``-N`` must start with a
  letter and may not hold ``"`` or white space.
* ``qstat -f -F json`` prints the same document shape (``timestamp``, ``pbs_version``,
  ``pbs_server``, ``Jobs``; tab-separated as the real one), ``-x`` adds finished jobs
  (without it a finished job gives "Job has finished" and exit 35), ``-t`` lists an
  array's subjobs, an unknown id gives "qstat: Unknown Job Id <id>" on stderr and
  exit 153 while stdout still carries the JSON of the others.
* States Q (queued), H (held with ``-h``), R, E (exiting, while output is copied),
  B (array begun, substate 70), X (finished subjob of a running array), F (finished);
  substates 92 (ok), 93 (failed), 91 (deleted, also when deleted while running).
* Array subjobs that have not run show their array's attributes (the samples of the
  2026-11-23 run): its ``stime``, the parent's current ``Exit_status`` (0 or 1, from the
  subjob that ended last), ``^array_index^`` paths, no ``array_id``/``array_index``; one
  deleted while queued is X, substate 70, "Subjob finished", then F 91 with the array.
  A queued job carries "Not Running: Not enough free nodes available" while it waits.
* ``Exit_status``: the script's exit code; 256+signal when a signal killed it (qdel of a
  running job: SIGTERM -> 271, SIGKILL after the kill delay -> 265); -29 past the
  walltime (SIGTERM, then SIGKILL); -27 past ``mem`` (a resident-set watch of the job's
  session); a job deleted while queued ends in F with no ``Exit_status``.
* ``qdel`` of a finished job: "Job has finished", exit 35; unknown: exit 153.
* Jobs really run: each ``qsub`` starts a detached runner that runs the script with
  bash in ``$HOME`` (as PBS does), with only the PBS variables and the login basics in
  its environment (no ``-V``: the submitter's other variables do not reach the job),
  at most ``$PBS_EMU_SLOTS`` jobs at once. Output is spooled and copied to the
  ``-o``/``-e`` paths at the end (``^array_index^`` expanded), as PBS does.

Knobs (environment of the commands): ``PBS_EMU_HOME`` (state directory, required),
``PBS_EMU_SERVER`` (default ``pbs01``), ``PBS_EMU_SLOTS`` (default 4),
``PBS_EMU_KILL_DELAY`` (seconds between SIGTERM and SIGKILL, default 2),
``PBS_EMU_HISTORY_S`` (how long finished jobs stay in history; default forever),
a file ``down`` in ``PBS_EMU_HOME`` (the server is down: every command fails with errno 15010,
as during a ``qterm``; running jobs go on and keep their history),
``PBS_EMU_DROP_OPERANDS=1`` (the qstat client of OpenPBS's main branch after 23.06.06: a JSON
query of several operands answers rc 0 with the first operand's jobs only),
``PBS_EMU_RAW_VARIABLES=1`` (write ``Variable_List`` values unescaped, the invalid JSON
some PBS versions print), ``PBS_EMU_LOG`` (a file each command invocation is appended to).
``qrerun JOB`` requeues a running job (as a node failure does): killed, queued again, started
again with ``run_count`` one higher and a new ``stime``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

VERSION = "23.06.06"
RC_UNKNOWN = 153
RC_FINISHED = 35


def home() -> Path:
    path = os.environ.get("PBS_EMU_HOME")
    if not path:
        sys.stderr.write("pbs emulator: PBS_EMU_HOME is not set\n")
        raise SystemExit(1)
    p = Path(path)
    (p / "jobs").mkdir(parents=True, exist_ok=True)
    return p


def server() -> str:
    return os.environ.get("PBS_EMU_SERVER", "pbs01")


def ctime(t: float | None = None) -> str:
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(t if t is not None else time.time()))


@contextmanager
def locked() -> Iterator[Path]:
    h = home()
    with open(h / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield h
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load(h: Path, seq: int) -> dict[str, Any] | None:
    try:
        return json.loads((h / "jobs" / f"{seq}.json").read_text())
    except (OSError, ValueError):
        return None


def save(h: Path, rec: dict[str, Any]) -> None:
    path = h / "jobs" / f"{rec['seq']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, path)


def all_seqs(h: Path) -> list[int]:
    return sorted(int(p.stem) for p in (h / "jobs").glob("*.json"))


def log_call(name: str, argv: list[str]) -> None:
    path = os.environ.get("PBS_EMU_LOG")
    if path:
        with open(path, "a") as handle:
            handle.write(json.dumps([name, *argv]) + "\n")


# ---------------------------------------------------------------------------- resources

def parse_walltime(text: str) -> int:
    parts = [int(p) for p in str(text).split(":")]
    total = 0
    for p in parts:
        total = total * 60 + p
    return total


def parse_size_kb(text: str) -> int:
    m = re.fullmatch(r"(\d+)([kmgt]?)(b|w)?", str(text).strip().lower())
    if not m:
        raise ValueError(text)
    mult = {"": 1 / 1024, "k": 1, "m": 1024, "g": 1024**2, "t": 1024**3}[m.group(2)]
    return int(int(m.group(1)) * mult * (8 if m.group(3) == "w" else 1))


def add_resources(resources: dict[str, str], spec: str) -> None:
    """``-l select=2:ncpus=4,walltime=00:01:00`` (commas split resources, except inside select)."""
    for part in re.split(r",(?=[A-Za-z_]+=)", spec):
        if "=" in part:
            key, _, value = part.partition("=")
            resources[key.strip()] = value.strip()


def resource_list(resources: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    select = resources.get("select", "1")
    chunks = select.split("+")
    nodect = 0
    ncpus = 0
    mem_kb = 0
    for chunk in chunks:
        bits = chunk.split(":")
        count = int(bits[0]) if bits[0].isdigit() else 1
        nodect += count
        attrs = dict(b.split("=", 1) for b in bits[1:] if "=" in b)
        ncpus += count * int(attrs.get("ncpus", 1))
        if "mem" in attrs:
            mem_kb += count * parse_size_kb(attrs["mem"])
    out["ncpus"] = ncpus
    if mem_kb:
        out["mem"] = f"{mem_kb}kb"
    out["nodect"] = nodect
    out["place"] = resources.get("place", "free")
    out["select"] = select if ":" in select or "+" in select else f"{select}:ncpus=1"
    for key, value in resources.items():
        if key not in ("select", "place", "ncpus", "nodect"):
            out[key] = value
    out.setdefault("walltime", "01:00:00")
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------- qsub

OPTS_WITH_VALUE = set("ANoeJlqvWrmMSpaCcPRuz")


def parse_args(argv: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    opts: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return opts, argv[i + 1:]
        if arg.startswith("-") and len(arg) >= 2:
            letter = arg[1]
            if letter in OPTS_WITH_VALUE:
                value = arg[2:] if len(arg) > 2 else (argv[i + 1] if i + 1 < len(argv) else None)
                i += 1 if len(arg) > 2 else 2
                opts.append((letter, value))
                continue
            opts.append((letter, None))
            i += 1
            continue
        return opts, argv[i:]
    return opts, []


def script_directives(text: str) -> list[tuple[str, str | None]]:
    """``#PBS`` lines until the first command line, as qsub reads them."""
    opts: list[tuple[str, str | None]] = []
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        if i == 0 and line.startswith("#!"):
            continue
        if not line or (line.startswith("#") and not line.startswith("#PBS")):
            continue
        if not line.startswith("#PBS"):
            break
        try:
            words = shlex.split(line[4:], comments=True)
        except ValueError:
            words = line[4:].split()
        got, _ = parse_args(words)
        opts += got
    return opts


def _keys_of(rec: dict[str, Any]) -> list[str | None]:
    """A job's subjob keys in index order; [None] for a job that is not an array."""
    if not rec["array"]:
        return [None]
    subjobs: list[str] = sorted(rec["subjobs"], key=int)
    return list(subjobs)


def parse_range(spec: str) -> list[int] | None:
    m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?", spec.strip())
    if not m:
        return None
    lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
    if hi < lo or step < 1:
        return None
    return list(range(lo, hi + 1, step))


def qsub(argv: list[str]) -> int:
    opts, operands = parse_args(argv)
    if operands:
        script_path = Path(operands[0])
        try:
            text = script_path.read_text()
        except OSError as exc:
            sys.stderr.write(f"qsub: script file:: {exc.strerror}\n")
            return 2
        default_name = script_path.name
    else:
        text = sys.stdin.read()
        default_name = "STDIN"
    if ("I", None) in opts:
        sys.stderr.write("qsub: interactive jobs are not emulated\n")
        return 2
    # Script directives first, the command line overrides them.
    merged = script_directives(text) + opts
    name = default_name
    out_path = err_path = None
    join = "n"
    indices: list[int] | None = None
    resources: dict[str, str] = {}
    queue = "workq"
    account = None
    variables: dict[str, str] = {}
    hold = False
    copy_env = False
    for letter, value in merged:
        if letter in OPTS_WITH_VALUE and value is None:
            sys.stderr.write(f"qsub: option requires an argument -- '{letter}'\n")
            return 2
        if letter == "N":
            if value is None or not re.fullmatch(r"[A-Za-z][^\s\"'@]{0,235}", value):
                sys.stderr.write("qsub: illegal -N value\n")
                return 2
            name = value
        elif letter == "o":
            out_path = value
        elif letter == "e":
            err_path = value
        elif letter == "j":
            join = value or "oe"
        elif letter == "J":
            indices = parse_range(value or "")
            if indices is None or len(indices) < 2:
                sys.stderr.write("qsub: illegal -J value\n")
                return 2
        elif letter == "l":
            add_resources(resources, value or "")
        elif letter == "q":
            queue = value or queue
        elif letter == "A":
            account = value
        elif letter == "v":
            for item in (value or "").split(","):
                key, eq, val = item.partition("=")
                variables[key] = val if eq else os.environ.get(key, "")
        elif letter == "h":
            hold = True
        elif letter == "V":
            copy_env = True
    allowed = os.environ.get("PBS_EMU_QUEUES")
    if allowed and queue not in allowed.split(","):
        sys.stderr.write("qsub: Unknown queue\n")
        return 1
    if "walltime" in resources:
        try:
            parse_walltime(resources["walltime"])
        except ValueError:
            sys.stderr.write("qsub: Illegal attribute or resource value Resource_List.walltime\n")
            return 2
    now = time.time()
    workdir = os.getcwd()
    with locked() as h:
        seq_file = h / "seq"
        seq = int(seq_file.read_text()) if seq_file.exists() else 0
        seq_file.write_text(str(seq + 1))
        srv = server()
        is_array = indices is not None
        job_id = f"{seq}[].{srv}" if is_array else f"{seq}.{srv}"
        scripts = h / "scripts"
        scripts.mkdir(exist_ok=True)
        (scripts / f"{seq}.sh").write_text(text)
        var_list = {
            "PBS_O_HOME": os.environ.get("HOME", "/"),
            "PBS_O_LOGNAME": os.environ.get("USER", "user"),
            "PBS_O_PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PBS_O_MAIL": f"/var/mail/{os.environ.get('USER', 'user')}",
            "PBS_O_SHELL": "/bin/bash",
            "PBS_O_WORKDIR": workdir,
            "PBS_O_SYSTEM": "Linux",
            "PBS_O_QUEUE": queue,
            "PBS_O_HOST": "localhost",
        }
        if copy_env:
            var_list.update({k: v for k, v in os.environ.items() if not k.startswith("PBS_")})
        var_list.update(variables)
        suffix = ".^array_index^" if is_array else ""
        attrs: dict[str, Any] = {
            "Job_Name": name,
            "Job_Owner": f"{os.environ.get('USER', 'user')}@localhost",
            "job_state": "H" if hold else "Q",
            "queue": queue,
            "server": srv,
            "Checkpoint": "u",
            "ctime": ctime(now),
            "Error_Path": _path_attr(err_path, workdir, f"{name}.e{seq}{suffix}"),
            "Hold_Types": "u" if hold else "n",
            "Join_Path": join,
            "Keep_Files": "n",
            "Mail_Points": "a",
            "mtime": ctime(now),
            "Output_Path": _path_attr(out_path, workdir, f"{name}.o{seq}{suffix}"),
            "Priority": 0,
            "qtime": ctime(now),
            "Rerunable": "True",
            "Resource_List": resource_list(resources),
            "substate": 20 if hold else 10,
            "Variable_List": var_list,
            "etime": ctime(now),
            "Submit_arguments": " ".join(shlex.quote(a) for a in argv),
            "project": "_pbs_project_default",
            "Submit_Host": "localhost",
        }
        if account:
            attrs["Account_Name"] = account
        rec: dict[str, Any] = {"seq": seq, "id": job_id, "array": is_array, "attrs": attrs, "subjobs": {},
                               "submitted": now}
        if indices is not None:
            attrs["array"] = "True"
            attrs["array_indices_submitted"] = f"{indices[0]}-{indices[-1]}" if indices == list(
                range(indices[0], indices[-1] + 1)) else ",".join(map(str, indices))
            for i in indices:
                sub = {k: v for k, v in attrs.items() if not k.startswith("array")}
                sub["Error_Path"] = attrs["Error_Path"].replace("^array_index^", str(i))
                sub["Output_Path"] = attrs["Output_Path"].replace("^array_index^", str(i))
                sub["array_id"] = job_id
                sub["array_index"] = i
                rec["subjobs"][str(i)] = sub
            _refresh_parent(rec)
        save(h, rec)
    if not hold:
        log = open(os.devnull, "w")
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "run", str(seq)], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         env={**os.environ})
    print(job_id)
    return 0


def _path_attr(given: str | None, workdir: str, default: str) -> str:
    if given is None:
        return f"localhost:{os.path.join(workdir, default)}"
    if ":" in given.split("/", 1)[0]:
        return given
    return f"localhost:{given if os.path.isabs(given) else os.path.join(workdir, given)}"


def _refresh_parent(rec: dict[str, Any]) -> None:
    """An array parent's state from its subjobs (Q, B, F) and its counters."""
    subs = rec["subjobs"].values()
    states = [s["job_state"] for s in subs]
    attrs = rec["attrs"]
    queued = sum(1 for s in states if s in "QH")
    running = sum(1 for s in states if s in "RE")
    done = sum(1 for s in states if s in "XF")
    attrs["array_state_count"] = f"Queued:{queued} Running:{running} Exiting:0 Expired:{done}"
    remaining = [s["array_index"] for s in subs if s["job_state"] in "QH"]
    attrs["array_indices_remaining"] = _ranges(remaining) if remaining else "-"
    if done == len(states):
        # Finished: the parent keeps the Exit_status its last subjob to end gave it (0 or 1);
        # substate 91 when a subjob was deleted. Subjobs deleted before they ran go 70 -> 91.
        deleted = any(s.get("_deleted_queued") or s.get("_was_deleted") for s in subs)
        attrs["job_state"] = "F"
        attrs["substate"] = 91 if deleted else (92 if attrs.get("Exit_status", 0) == 0 else 93)
        attrs["obittime"] = ctime()
        attrs["Stageout_status"] = 1
        attrs["comment"] = (attrs.get("comment") or "Job Array") + (" and terminated" if deleted else " and finished")
        attrs["history_timestamp"] = int(time.time())
        for s in rec["subjobs"].values():
            if s["job_state"] == "X":
                s["job_state"] = "F"
            if s.get("_deleted_queued"):
                s["substate"] = 91
    elif running or done:
        # Begun: state B, substate 70; the subjobs that have not run show this (parent) view.
        attrs["job_state"] = "B"
        if "stime" not in attrs:
            attrs["stime"] = ctime()
            attrs["comment"] = "Job Array Began at " + time.strftime("%a %b %d at %H:%M")
        attrs["substate"] = 70
    attrs["mtime"] = ctime()


def _ranges(values: list[int]) -> str:
    out: list[str] = []
    values = sorted(values)
    start = prev = values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        if v is not None:
            start = prev = v
    return ",".join(out)


# ---------------------------------------------------------------------------- the runner

def _session_rss_kb(sid: int) -> int:
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:  # field 6 of stat: session id (after state, ppid, pgrp)
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total


def _job_env(rec: dict[str, Any], attrs: dict[str, Any], job_id: str, index: int | None, h: Path,
             nodefile: Path) -> dict[str, str]:
    var = rec["attrs"]["Variable_List"]
    user_home = var.get("PBS_O_HOME", "/")
    env = {
        "HOME": user_home,
        "USER": var.get("PBS_O_LOGNAME", "user"),
        "LOGNAME": var.get("PBS_O_LOGNAME", "user"),
        "SHELL": "/bin/bash",
        # The login shell's PATH on a real system; the submitter's here (PBS_O_PATH).
        "PATH": var.get("PBS_O_PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PBS_JOBID": job_id,
        "PBS_JOBNAME": attrs["Job_Name"],
        "PBS_QUEUE": attrs["queue"],
        "PBS_ENVIRONMENT": "PBS_BATCH",
        "PBS_NODEFILE": str(nodefile),
        "PBS_JOBDIR": user_home,
        "TMPDIR": str(h / "tmp"),
        "ENVIRONMENT": "BATCH",
    }
    env.update({k: str(v) for k, v in var.items()})
    if index is not None:
        env["PBS_ARRAY_INDEX"] = str(index)
        env["PBS_ARRAY_ID"] = rec["id"]
    return env


def _copy_out(spool: Path, dest: str) -> None:
    path = dest.split(":", 1)[1] if ":" in dest.split("/", 1)[0] else dest
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(spool.read_bytes() if spool.exists() else b"")
    except OSError:
        pass


NOT_RUNNING = "Not Running: Not enough free nodes available"


def _not_running(h: Path, seq: int, key: Any) -> None:
    """The scheduler's comment on a job it could not start (on the array while none of its
    subjobs has started: the queued subjobs show the array's comment)."""
    with locked():
        rec = load(h, seq)
        if rec is None:
            return
        attrs = rec["attrs"]
        if attrs.get("comment") is None and attrs["job_state"] in "QH":
            attrs["comment"] = NOT_RUNNING
            save(h, rec)


def run(seq: int) -> int:
    """Run one submission (a job, or every subjob of an array) to the end."""
    h = home()
    slots_dir = h / "slots"
    slots_dir.mkdir(exist_ok=True)
    (h / "tmp").mkdir(exist_ok=True)
    (h / "spool").mkdir(exist_ok=True)
    nslots = max(1, int(os.environ.get("PBS_EMU_SLOTS", "4")))
    kill_delay = float(os.environ.get("PBS_EMU_KILL_DELAY", "2"))
    host = socket.gethostname().split(".")[0]
    script = h / "scripts" / f"{seq}.sh"
    loaded = load(h, seq)
    if loaded is None:
        return 1
    rec = loaded
    keys = _keys_of(rec)
    pending = list(keys)
    running: dict[Any, dict[str, Any]] = {}

    def job_id_of(key: Any) -> str:
        return f"{seq}[{key}].{server()}" if key is not None else rec["id"]

    def attrs_of(r: dict[str, Any], key: Any) -> dict[str, Any]:
        return r["subjobs"][key] if key is not None else r["attrs"]

    def try_slot() -> Any:
        for n in range(nslots):
            handle = open(slots_dir / f"{n}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return handle
            except OSError:
                handle.close()
        return None

    while pending or running:
        # Start what can start (skipping subjobs deleted while queued).
        with locked():
            rec = load(h, seq) or rec
            for key in list(pending):
                if attrs_of(rec, key)["job_state"] not in "QH":
                    pending.remove(key)
        for key in list(pending):
            slot = try_slot()
            if slot is None:
                _not_running(h, seq, key)
                break
            with locked():
                rec = load(h, seq) or rec
                attrs = attrs_of(rec, key)
                if attrs["job_state"] not in "Q":
                    slot.close()
                    pending.remove(key)
                    continue
                jid = job_id_of(key)
                safe = jid.replace("[", "_").replace("]", "_")
                nodefile = h / "tmp" / f"{safe}.nodes"
                nodefile.write_text((host + "\n") * int(attrs["Resource_List"].get("nodect", 1)))
                out_spool, err_spool = h / "spool" / f"{safe}.OU", h / "spool" / f"{safe}.ER"
                env = _job_env(rec, attrs, jid, int(key) if key is not None else None, h, nodefile)
                out = open(out_spool, "wb")
                err = out if attrs.get("Join_Path") == "oe" else open(err_spool, "wb")
                proc = subprocess.Popen(["/bin/bash", str(script)], cwd=env["HOME"], env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True)
                now = time.time()
                attrs.update({"job_state": "R", "substate": 42, "stime": ctime(now), "session_id": proc.pid,
                              "exec_host": f"{host}/0", "exec_vnode": f"({host}:ncpus=1)", "jobdir": env["HOME"],
                              "run_count": int(attrs.get("run_count", 0)) + 1, "mtime": ctime(now),
                              "comment": f"Job run at {time.strftime('%a %b %d at %H:%M', time.localtime(now))} "
                                         f"on ({host}:ncpus=1)",
                              "resources_used": {"cpupercent": 0, "cput": "00:00:00", "mem": "0kb",
                                                 "ncpus": attrs["Resource_List"].get("ncpus", 1),
                                                 "vmem": "0kb", "walltime": "00:00:00"}})
                if rec["array"]:
                    _refresh_parent(rec)
                save(h, rec)
            limit = attrs["Resource_List"].get("walltime")
            mem = attrs["Resource_List"].get("mem")
            running[key] = {"proc": proc, "slot": slot, "start": now, "out": out, "err": err,
                            "out_spool": out_spool, "err_spool": err_spool,
                            "walltime": parse_walltime(limit) if limit else None,
                            "mem_kb": parse_size_kb(mem) if mem else None, "killed": None, "term_at": None,
                            "peak_kb": 0}
            pending.remove(key)
        # Follow what runs.
        for key, job in list(running.items()):
            proc = job["proc"]
            elapsed = time.time() - job["start"]
            if proc.poll() is None:
                if job["killed"] is None:
                    rss = 0
                    if job["mem_kb"] is not None or time.time() - job.get("rss_at", 0) > 1:
                        rss = _session_rss_kb(proc.pid)
                        job["rss_at"] = time.time()
                        job["peak_kb"] = max(job["peak_kb"], rss)
                    with locked():
                        cur = load(h, seq) or rec
                        deleted = attrs_of(cur, key).get("_deleted")
                        rerun = attrs_of(cur, key).get("_rerun")
                    if deleted:
                        job["killed"] = "qdel"
                    elif rerun:
                        job["killed"] = "rerun"
                    elif job["walltime"] is not None and elapsed > job["walltime"]:
                        job["killed"] = "walltime"
                    elif job["mem_kb"] is not None and rss > job["mem_kb"]:
                        job["killed"] = "mem"
                    if job["killed"]:
                        try:
                            os.killpg(proc.pid, signal.SIGTERM)
                        except ProcessLookupError:
                            pass
                        job["term_at"] = time.time()
                elif time.time() - job["term_at"] > kill_delay:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                continue
            if job["killed"] == "rerun":
                # Requeued: back to Q, not run here; run_count stays until the next start.
                job["out"].close()
                if job["err"] is not job["out"]:
                    job["err"].close()
                with locked():
                    rec = load(h, seq) or rec
                    attrs = attrs_of(rec, key)
                    attrs.pop("_rerun", None)
                    for gone in ("exec_host", "exec_vnode", "session_id", "resources_used"):
                        attrs.pop(gone, None)
                    attrs.update({"job_state": "Q", "substate": 10, "mtime": ctime(),
                                  "comment": "Job requeued (qrerun)"})
                    if rec["array"]:
                        _refresh_parent(rec)
                    save(h, rec)
                job["slot"].close()
                del running[key]
                pending.append(key)
                continue
            # Ended: E while the output is copied, then X (array still running) or F.
            code = proc.returncode
            status = code if code >= 0 else 256 - code
            if job["killed"] == "walltime":
                status = -29
            elif job["killed"] == "mem":
                status = -27
            with locked():
                rec = load(h, seq) or rec
                attrs = attrs_of(rec, key)
                if (job["killed"] == "qdel" or attrs.get("_deleted")) and code >= 0:
                    status = 256 + signal.SIGTERM  # deleted, but the script caught the signal
                attrs["job_state"] = "E"
                attrs["substate"] = 51
                save(h, rec)
            job["out"].close()
            if job["err"] is not job["out"]:
                job["err"].close()
            _copy_out(job["out_spool"], attrs["Output_Path"])
            if attrs.get("Join_Path") != "oe":
                _copy_out(job["err_spool"], attrs["Error_Path"])
            now = time.time()
            with locked():
                rec = load(h, seq) or rec
                attrs = attrs_of(rec, key)
                used = attrs.setdefault("resources_used", {})
                secs = int(now - job["start"])
                used["walltime"] = f"{secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}"
                used["mem"] = f"{job['peak_kb']}kb"
                deleted = job["killed"] == "qdel" or bool(attrs.pop("_deleted", None))
                attrs.update({"Exit_status": status, "obittime": ctime(now), "mtime": ctime(now),
                              "substate": 91 if deleted else (92 if status == 0 else 93), "Stageout_status": 1,
                              "history_timestamp": int(now)})
                if deleted:
                    attrs["_was_deleted"] = True
                how = {"walltime": "exceeded resource walltime", "mem": "exceeded resource mem",
                       "qdel": f"terminated by {attrs['Job_Owner']}"}.get(
                    "qdel" if deleted else job["killed"] or "", "finished" if status == 0 else "failed")
                attrs["comment"] = attrs.get("comment", "Job run") + f" and {how}"
                if rec["array"]:
                    attrs["job_state"] = "X"
                    # The parent's Exit_status follows the subjob that ended last (0 or 1), and
                    # every subjob that has not run shows it as its own.
                    rec["attrs"]["Exit_status"] = 0 if status == 0 else 1
                    rec["attrs"]["Stageout_status"] = 1
                    _refresh_parent(rec)
                else:
                    attrs["job_state"] = "F"
                save(h, rec)
            job["slot"].close()
            del running[key]
        time.sleep(0.05)
    return 0


# ---------------------------------------------------------------------------- qstat

def _visible(rec: dict[str, Any], now: float) -> bool:
    keep = os.environ.get("PBS_EMU_HISTORY_S")
    if keep is None or rec["attrs"]["job_state"] != "F":
        return True
    return now - rec["attrs"].get("history_timestamp", now) <= float(keep)


def _lookup(h: Path, operand: str) -> tuple[dict[str, Any], str | None] | None:
    """(record, subjob key or None) for an id operand; None when unknown."""
    m = re.fullmatch(r"(\d+)(\[(\d*)\])?(?:\.([A-Za-z0-9_.\-]+))?", operand.strip())
    if not m:
        return None
    if m.group(4) and m.group(4) != server():
        return None
    rec = load(h, int(m.group(1)))
    if rec is None or not _visible(rec, time.time()):
        return None
    if rec["array"] != bool(m.group(2)):
        return None
    if m.group(3):
        return (rec, m.group(3)) if m.group(3) in rec["subjobs"] else None
    return rec, None


def _public(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if not k.startswith("_")}


# What a subjob that has not run does not show of its array's attributes.
_PARENT_ONLY = ("array", "array_state_count", "array_indices_submitted", "array_indices_remaining", "project",
                "Submit_Host", "history_timestamp")


def _subjob_view(rec: dict[str, Any], key: str) -> dict[str, Any]:
    """A subjob as qstat shows it: its own attributes once it has run (``exec_host``); before
    that, its array's (stime, the parent's current Exit_status, ^array_index^ paths, no
    array_id/array_index) with its own state, substate and, once deleted, comment."""
    sub = rec["subjobs"][key]
    if sub.get("exec_host"):
        return _public(sub)
    view = {k: v for k, v in _public(rec["attrs"]).items() if k not in _PARENT_ONLY}
    view.update({"job_state": sub["job_state"], "substate": sub["substate"],
                 "mtime": sub.get("mtime", view.get("mtime"))})
    if sub.get("_deleted_queued"):
        view["comment"] = sub["comment"]
    return view


def _dump(jobs: dict[str, dict[str, Any]]) -> str:
    doc: dict[str, Any] = {"timestamp": int(time.time()), "pbs_version": VERSION, "pbs_server": server()}
    if jobs:
        doc["Jobs"] = jobs
    text = json.dumps(doc, indent="\t", separators=(",", ":\t"))
    if os.environ.get("PBS_EMU_RAW_VARIABLES") == "1":
        # Some PBS versions print Variable_List values as they are: invalid JSON for odd values.
        for attrs in jobs.values():
            for key, value in attrs.get("Variable_List", {}).items():
                text = text.replace(f"{json.dumps(key)}:\t{json.dumps(value)}", f"{json.dumps(key)}:\t\"{value}\"")
    return text


def qstat(argv: list[str]) -> int:
    flags: set[str] = set()
    fmt = None
    operands: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-F":
            fmt = argv[i + 1] if i + 1 < len(argv) else None
            i += 2
            continue
        if a.startswith("-") and len(a) > 1:
            flags.update(a[1:])
            i += 1
            continue
        operands.append(a)
        i += 1
    history = "x" in flags
    subjobs = "t" in flags
    full = "f" in flags
    if os.environ.get("PBS_EMU_DROP_OPERANDS") == "1" and full and fmt == "json" and len(operands) > 1:
        # The qstat client of OpenPBS's main branch after 23.06.06: a JSON query of several
        # operands answers rc 0 with the first operand's jobs only (text mode lists them all).
        operands = operands[:1]
    h = home()
    now = time.time()
    rc = 0
    errors: list[str] = []
    selected: list[tuple[dict[str, Any], str | None]] = []
    with locked():
        if operands:
            for op in operands:
                found = _lookup(h, op)
                if found is None:
                    errors.append(f"qstat: Unknown Job Id {_full_id(op)}")
                    rc = RC_UNKNOWN
                    continue
                rec, key = found
                state = (rec["subjobs"][key] if key is not None else rec["attrs"])["job_state"]
                if not history and state in "FX" and (key is not None or state == "F"):
                    errors.append(f"qstat: {_full_id(op)} Job has finished, use -x or -H to obtain historical "
                                  "job information")
                    rc = rc or RC_FINISHED
                    continue
                selected.append((rec, key))
        else:
            for seq in all_seqs(h):
                job = load(h, seq)
                if job and _visible(job, now) and (history or job["attrs"]["job_state"] != "F"):
                    selected.append((job, None))
    jobs: dict[str, dict[str, Any]] = {}
    for rec, key in selected:
        if key is not None:
            jobs[f"{rec['seq']}[{key}].{server()}"] = _subjob_view(rec, key)
            continue
        jobs[rec["id"]] = _public(rec["attrs"])
        if rec["array"] and subjobs:
            for k in sorted(rec["subjobs"], key=int):
                jobs[f"{rec['seq']}[{k}].{server()}"] = _subjob_view(rec, k)
    if full and fmt == "json":
        sys.stdout.write(_dump(jobs) + "\n")
    elif full:
        for jid, attrs in jobs.items():
            sys.stdout.write(f"Job Id: {jid}\n")
            for k, v in attrs.items():
                if isinstance(v, dict):
                    for k2, v2 in v.items():
                        sys.stdout.write(f"    {k}.{k2} = {v2}\n")
                else:
                    sys.stdout.write(f"    {k} = {v}\n")
            sys.stdout.write("\n")
    elif jobs:
        sys.stdout.write("Job id            Name             User              Time Use S Queue\n")
        sys.stdout.write("----------------  ---------------- ----------------  -------- - -----\n")
        for jid, attrs in jobs.items():
            user = attrs.get("Job_Owner", "user@").split("@")[0]
            used = attrs.get("resources_used", {}).get("cput", "0")
            sys.stdout.write(f"{jid:<20} {attrs['Job_Name'][:16]:<16} {user:<15} {used:>8} {attrs['job_state']} "
                             f"{attrs['queue']:<15}\n")
    for e in errors:
        sys.stderr.write(e + "\n")
    return rc


def _full_id(op: str) -> str:
    return op if "." in op else f"{op}.{server()}"


# ---------------------------------------------------------------------------- qrerun

def qrerun(argv: list[str]) -> int:
    """``qrerun JOB``: a running job is killed and queued again (what a node failure does too); it
    starts again later with ``run_count`` one higher and a new ``stime``."""
    operands = [a for a in argv if not a.startswith("-")]
    h = home()
    rc = 0
    with locked():
        for op in operands:
            found = _lookup(h, op)
            if found is None:
                sys.stderr.write(f"qrerun: Unknown Job Id {_full_id(op)}\n")
                rc = RC_UNKNOWN
                continue
            rec, key = found
            attrs = rec["subjobs"][key] if key is not None else rec["attrs"]
            if attrs["job_state"] != "R":
                sys.stderr.write(f"qrerun: Request invalid for state of job {_full_id(op)}\n")
                rc = 1
                continue
            attrs["_rerun"] = True  # the job's runner kills it and queues it again
            save(h, rec)
    return rc


# ---------------------------------------------------------------------------- qdel

def qdel(argv: list[str]) -> int:
    operands = [a for a in argv if not a.startswith("-")]
    if not operands:
        sys.stderr.write("usage: qdel [-W force|suppress_email=X] [-x] job_identifier...\n")
        return 2
    h = home()
    rc = 0
    to_signal: list[int] = []
    with locked():
        for op in operands:
            found = _lookup(h, op)
            if found is None:
                sys.stderr.write(f"qdel: Unknown Job Id {_full_id(op)}\n")
                rc = RC_UNKNOWN
                continue
            rec, key = found
            keys = [key] if key is not None else _keys_of(rec)
            any_alive = False
            for k in keys:
                attrs = rec["subjobs"][k] if k is not None else rec["attrs"]
                state = attrs["job_state"]
                if state in "QH" and k is not None:
                    # A subjob deleted before it ran: X, substate 70, "Subjob finished"; it goes on
                    # showing its array's stime and Exit_status (91 once the array has finished).
                    attrs.update({"job_state": "X", "substate": 70, "mtime": ctime(), "_deleted_queued": True,
                                  "comment": "Subjob finished"})
                    any_alive = True
                elif state in "QH":
                    attrs.update({"job_state": "F", "substate": 91, "mtime": ctime(),
                                  "history_timestamp": int(time.time()),
                                  "comment": attrs.get("comment", "Not Running") + " and terminated"})
                    any_alive = True
                elif state in "RE":
                    attrs["_deleted"] = True
                    if attrs.get("session_id"):
                        to_signal.append(int(attrs["session_id"]))
                    any_alive = True
            if rec["array"]:
                _refresh_parent(rec)
            if not any_alive:
                sys.stderr.write(f"qdel: Job has finished {_full_id(op)}\n")
                rc = rc or RC_FINISHED
            save(h, rec)
    for pid in to_signal:  # the runner sees _deleted, reports 271 (or 265 after the kill delay)
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return rc


def main(name: str, argv: list[str]) -> int:
    log_call(name, argv)
    if name != "run" and (home() / "down").exists():
        # The server stopped (qterm): every client call fails, jobs already running go on.
        sys.stderr.write(f"Connection refused\n{name}: cannot connect to server {server()} (errno=15010)\n")
        return 1
    if name == "qsub":
        return qsub(argv)
    if name == "qstat":
        return qstat(argv)
    if name == "qdel":
        return qdel(argv)
    if name == "qrerun":
        return qrerun(argv)
    if name == "run":
        return run(int(argv[0]))
    sys.stderr.write(f"pbs emulator: unknown command {name}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2:]))
