"""Machine-wide admission of local runs by cores: a run of N processes holds N cores, and by
default (unless its sweep says ``share: true``) every core, so nothing runs beside it.

Local runs measure this machine, so two runs must never time each other's work on the
same cores. Every local job process (whatever ``orch`` process or ``ORCH_HOME`` submitted
it) queues in one small JSON ledger in a machine-wide directory, guarded by ``flock``:
first come, first served (a run waits behind every run submitted before it, so small
runs never starve a big one), admitted when the cores it needs are free. A run that
needs more cores than the machine has waits until the machine is empty and then runs
alone on every core (``Grant.alone``).

The ledger holds process ids with their start times; an entry whose process is gone
(killed with -9, machine rebooted) is dropped by the next process that reads the ledger,
so a crash never holds cores for ever. A holder stays alive while the job process or any
process of the script's process group lives.

Only the standard library: it runs inside every local job.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

DIR_ENV = "ORCH_LOCAL_CORES_DIR"  # where the ledger lives (tests point it at a temporary directory)
CAPACITY_ENV = "ORCH_LOCAL_CORES"  # the cores local runs may hold, overriding the site profile


# The ledger's JSON is a few entries per queued run; far larger is not one orch wrote.
STATE_LIMIT = 4 * 1024 * 1024


class UnsafeLedger(OSError):
    """A ledger folder orch will not use: not the user's own, writable by others, or a link."""


def ledger_dir() -> Path:
    """The user's directory of the ledger (``$ORCH_LOCAL_CORES_DIR`` when set).

    One per user: a folder every user could write (the machine-wide ``orch-local-cores`` of
    before) let another user plant a symbolic link as ``lock`` (a root job then made a 0600 file
    0666) or a ``state.json`` that failed or stalled every run. Runs of different users no longer
    queue together; a machine shared by several users' benchmarks sets ``executor: {cores: N}``
    apart for each, or points them at one folder they trust (``$ORCH_LOCAL_CORES_DIR``)."""
    return Path(os.environ.get(DIR_ENV) or Path(tempfile.gettempdir()) / f"orch-local-cores-{os.getuid()}")


def _warn(message: str) -> None:
    import sys

    print(f"orch: core ledger: {message}", file=sys.stderr)


def usable_cores() -> list[int]:
    """The core ids this process may run on (its affinity mask, not the machine's count)."""
    return sorted(os.sched_getaffinity(0))


def parse_capacity(value: Any, what: str) -> int:
    """A capacity from a profile or the environment: a whole number >= 1, else ValueError naming ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a whole number of cores >= 1, got {value!r}")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{what}: expected a whole number of cores >= 1, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{what}: expected a whole number of cores >= 1, got {value!r}")
    return number


def _start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot): with the pid, who it is."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # a zombie holds nothing
        return None
    return int(fields[19])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: alive
    return True


def _alive(entry: dict[str, Any]) -> bool:
    start = entry.get("start")
    if start is not None and _start_time(int(entry["pid"])) == start:
        return True
    pgid = entry.get("pgid")
    return pgid is not None and bool(pgid) and _group_alive(int(pgid))


def _valid_entry(entry: Any) -> bool:
    """An entry as ``acquire`` writes it: whole numbers where numbers go (bool is no number)."""
    if not isinstance(entry, dict):
        return False
    def whole(value: Any, optional: bool = False) -> bool:
        return (optional and value is None) or (type(value) is int and 0 <= value < 2 ** 62)
    slots = entry.get("slots", [])
    return (whole(entry.get("pid")) and entry["pid"] > 0 and whole(entry.get("start"), True)
            and whole(entry.get("ticket")) and whole(entry.get("pgid"), True)
            and isinstance(slots, list) and all(whole(slot) for slot in slots))


def _valid_state(state: Any) -> bool:
    return (isinstance(state, dict) and type(state.get("next", 1)) is int
            and all(isinstance(state.get(key, []), list) and all(_valid_entry(e) for e in state.get(key, []))
                    for key in ("waiting", "holding")))


@dataclass(frozen=True)
class Grant:
    """What a run was given: core ids to pin to, how many it holds, threads per process."""

    cores: list[int]  # distinct core ids the run's processes are pinned to
    held: int  # cores held in the ledger (= processes, or every core when it runs alone)
    processes: int
    capacity: int
    alone: bool  # needed more cores than the capacity: runs alone, on every core
    waited_s: float

    @property
    def threads(self) -> int:
        """Threads for each process: its share of the cores held, at least one."""
        return max(1, self.held // self.processes)


class CoreLedger:
    """One job's place in the machine-wide ledger (acquire once, release once)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = Path(directory) if directory else ledger_dir()
        self.ticket: int | None = None

    # --- the file, under the lock ----------------------------------------------------------
    def _open_lock(self) -> int:
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except FileExistsError:
            pass  # a link or a file in the way: refused below
        dir_fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            info = os.fstat(dir_fd)
            if info.st_uid != os.getuid() or info.st_mode & 0o022:
                raise UnsafeLedger(errno.EPERM, f"{self.dir}: owned by uid {info.st_uid} with mode "
                                   f"{info.st_mode & 0o7777:o}; a ledger folder must be yours and writable by "
                                   "you alone (not used; remove it or set $ORCH_LOCAL_CORES_DIR)")
            # Never through a link planted as the lock (O_NOFOLLOW), and never made writable by others.
            fd = os.open("lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _read(self) -> tuple[str, dict[str, Any]]:
        """The file's text and its state as written (no entry checked): safe without the lock,
        since the file is only ever replaced whole."""
        from orchestrator.safefile import open_regular, read_fd

        try:
            fd = open_regular(self.dir / "state.json", follow=False)
        except OSError:
            return "", {}
        try:
            raw = read_fd(fd, STATE_LIMIT)
            text = raw.decode() if raw is not None else ""
            state = json.loads(text)
        except (OSError, ValueError, RecursionError):
            return "", {}
        finally:
            os.close(fd)
        return text, state if isinstance(state, dict) else {}

    def _load(self) -> tuple[str, dict[str, Any]]:
        text, state = self._read()
        if text and not _valid_state(state):
            # Whatever wrote it, a state that cannot be read must not fail or stall every run.
            _warn(f"{self.dir / 'state.json'} is not a ledger orch wrote: started afresh")
            state = {}
        state.setdefault("next", 1)
        state["waiting"] = [e for e in state.get("waiting", []) if _alive(e)]
        state["holding"] = [e for e in state.get("holding", []) if _alive(e)]
        return text, state

    def _save(self, state: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".state.", dir=self.dir)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(state))
        os.replace(tmp, self.dir / "state.json")

    def _update(self, change: Callable[[dict[str, Any]], Any]) -> Any:
        fd = self._open_lock()
        try:
            text, state = self._load()
            result = change(state)
            if json.dumps(state) != text:  # unchanged: no write (waiters look often)
                self._save(state)
            return result
        finally:
            os.close(fd)  # closing releases the flock

    # --- the public part -------------------------------------------------------------------
    def acquire(self, processes: int, capacity: int | None = None, job: str = "", exclusive: bool = False,
                should_stop: Callable[[], bool] = lambda: False, poll_s: float = 0.2,
                on_wait: Callable[[int, int, int, int], None] | None = None) -> Grant | None:
        """Wait for the cores of ``processes`` processes; None when ``should_stop`` said so first.

        ``capacity``: cores runs may hold (default: this process's usable cores). Core ids are
        this process's usable cores, reused in turn when the capacity exceeds them.
        ``on_wait(runs_ahead, cores_held, cores_needed, capacity)`` is called once when the run waits.
        ``exclusive``: the run holds every core (nothing runs beside it: caches and memory bandwidth
        are shared by the cores too), its processes sharing them out as threads.
        """
        processes = max(1, int(processes))
        cores = usable_cores()
        capacity = capacity or len(cores)
        need = capacity if exclusive else min(processes, capacity)
        me = {"pid": os.getpid(), "start": _start_time(os.getpid()), "need": need, "job": job}
        began = time.monotonic()

        def enqueue(state: dict[str, Any]) -> None:
            self.ticket = int(state["next"])
            state["next"] = self.ticket + 1
            state["waiting"].append({**me, "ticket": self.ticket, "since": time.time()})

        def try_take(state: dict[str, Any]) -> tuple[list[int] | None, int, int]:
            waiting = sorted(state["waiting"], key=lambda e: e["ticket"])
            position = next((i for i, e in enumerate(waiting) if e["ticket"] == self.ticket), None)
            if position is None:  # dropped (e.g. our start time was unreadable): queue again
                enqueue(state)
                return None, len(waiting), 0
            taken = {s for e in state["holding"] for s in e.get("slots", [])}
            free = [s for s in range(capacity) if s not in taken]
            held = sum(len(e.get("slots", [])) for e in state["holding"])
            if position == 0 and len(free) >= need:
                slots = free[:need]
                state["waiting"] = [e for e in state["waiting"] if e["ticket"] != self.ticket]
                state["holding"].append({**me, "ticket": self.ticket, "slots": slots, "since": time.time()})
                return slots, position, held
            return None, position, held

        self._update(enqueue)
        told = False
        while True:
            if should_stop():
                self.release()
                return None
            if told and not self._worth_locking(capacity, need):
                # Behind another live run, or first with too few free cores: look again later,
                # without the lock (hundreds of queued runs must not fight over it).
                time.sleep(poll_s if self._first() else max(poll_s, 0.5))
                continue
            slots, position, held = self._update(try_take)
            if slots is not None:
                granted = sorted({cores[s % len(cores)] for s in slots})
                return Grant(cores=granted, held=len(slots), processes=processes, capacity=capacity,
                             alone=exclusive or processes > capacity, waited_s=time.monotonic() - began)
            if not told and on_wait is not None:
                on_wait(position, held, need, capacity)
            told = True
            time.sleep(poll_s)

    def _waiting_in_order(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        return sorted((e for e in state.get("waiting", []) if isinstance(e, dict) and "ticket" in e),
                      key=lambda e: e["ticket"])

    def _first(self) -> bool:
        waiting = self._waiting_in_order(self._read()[1])
        return bool(waiting) and waiting[0]["ticket"] == self.ticket

    def _worth_locking(self, capacity: int, need: int) -> bool:
        """From a look without the lock: may taking it change anything for this waiter?

        Yes when this run is first and enough cores look free or a holder looks dead, when
        the run first in line looks dead (someone must drop it), or when this run is not
        in the file at all.
        """
        text, state = self._read()
        if not text:
            return True
        waiting = self._waiting_in_order(state)
        if not any(e["ticket"] == self.ticket for e in waiting):
            return True
        head = waiting[0]
        if head["ticket"] != self.ticket:
            return not _alive(head)
        holding = [e for e in state.get("holding", []) if isinstance(e, dict)]
        taken = {s for e in holding for s in e.get("slots", [])}
        if sum(1 for s in range(capacity) if s not in taken) >= need:
            return True
        return not all(_alive(e) for e in holding)

    def hold_group(self, pgid: int) -> None:
        """Keep the cores while process group ``pgid`` (the script and its children) lives."""
        def change(state: dict[str, Any]) -> None:
            for entry in state["holding"]:
                if entry["ticket"] == self.ticket:
                    entry["pgid"] = pgid
        self._update(change)

    def release(self) -> None:
        """Give the cores back (or leave the queue); safe to call twice."""
        if self.ticket is None:
            return
        ticket = self.ticket

        def change(state: dict[str, Any]) -> None:
            state["waiting"] = [e for e in state["waiting"] if e["ticket"] != ticket]
            state["holding"] = [e for e in state["holding"] if e["ticket"] != ticket]
        try:
            self._update(change)
        except OSError as exc:  # the directory went away: nothing is held there any more
            if exc.errno not in (errno.ENOENT, errno.EACCES):
                raise
        self.ticket = None


def snapshot(directory: Path | None = None) -> dict[str, Any]:
    """The ledger as it is now (live entries only), for tests and diagnostics."""
    ledger = CoreLedger(directory)
    if not ledger.dir.exists():
        return {"next": 1, "waiting": [], "holding": []}
    return ledger._update(lambda state: json.loads(json.dumps(state)))
