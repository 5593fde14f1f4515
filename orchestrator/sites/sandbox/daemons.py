"""The Slurm daemons: slurmdbd, slurmctld and one slurmd per virtual node.

Starting, stopping and waiting for each, and reading the nodes' states from ``sinfo``.
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import (
    CLUSTER,
    CTLD_LOG,
    CTLD_PID,
    DBD_LOG,
    DBD_PID,
    LOG_DIR,
    NODES,
    RUN_DIR,
    STATE_DIR,
)
from orchestrator.sites.sandbox.layout import active_layout
from orchestrator.sites.sandbox.proc import _clean_env, _pid_alive, _run, _stop_pid, _tail

_USABLE_STATES = {"idle", "mixed", "allocated", "completing"}


def _usable(state: str) -> bool:
    return state.rstrip("*~#!%$@^-+").lower() in _USABLE_STATES and not state.endswith("*")


def _slurmd_pidfile(node: str) -> Path:
    return RUN_DIR / f"slurmd-{node}.pid"


def _slurmd_log(node: str) -> Path:
    return LOG_DIR / f"slurmd-{node}.log"


def _dirs(nodes: list[str] | tuple[str, ...] = NODES) -> None:
    for d in (STATE_DIR / "ctld", LOG_DIR, RUN_DIR, *(STATE_DIR / "d" / n for n in nodes)):
        d.mkdir(parents=True, exist_ok=True)


def _sacct_ok() -> bool:
    cp = _run(["sacct", "-n", "-X", "-P", "-o", "JobID", "-S", "now-1minutes", "-E", "now"], timeout=15,
              env=_clean_env())
    return cp.returncode == 0


def _sacctmgr_ok() -> bool:
    cp = _run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=15, env=_clean_env())
    return cp.returncode == 0


def _start_slurmdbd() -> None:
    if _pid_alive(DBD_PID, "slurmdbd"):
        return
    cp = _run(["/usr/sbin/slurmdbd"], timeout=30, env=_clean_env())
    if cp.returncode != 0:
        raise SandboxError(f"slurmdbd did not start: {cp.stderr.strip()}\n{_tail(DBD_LOG)}")


def _wait_dbd() -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _sacctmgr_ok():
            return
        if not _pid_alive(DBD_PID, "slurmdbd") and time.monotonic() > deadline - 50:
            raise SandboxError("slurmdbd exited after starting\n" + _tail(DBD_LOG))
        time.sleep(0.5)
    raise SandboxError("slurmdbd did not answer `sacctmgr show cluster` within 60 s\n" + _tail(DBD_LOG))


def _ensure_cluster_registered() -> bool:
    cp = _run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=15, env=_clean_env())
    if CLUSTER in cp.stdout.split():
        return False
    cp = _run(["sacctmgr", "-i", "add", "cluster", CLUSTER], timeout=30, env=_clean_env())
    if cp.returncode != 0 and "already exists" not in (cp.stdout + cp.stderr):
        raise SandboxError(f"sacctmgr add cluster {CLUSTER} failed: {cp.stdout}{cp.stderr}\n{_tail(DBD_LOG)}")
    return True


def _start_slurmctld() -> None:
    if _pid_alive(CTLD_PID, "slurmctld"):
        return
    cp = _run(["/usr/sbin/slurmctld"], timeout=60, env=_clean_env())
    if cp.returncode != 0:
        raise SandboxError(f"slurmctld did not start: {cp.stderr.strip()}\n{_tail(CTLD_LOG)}")


def _stop_slurmctld() -> None:
    pid = _pid_alive(CTLD_PID, "slurmctld")
    if pid:
        _stop_pid(pid, timeout=30)


def _ctld_ping() -> bool:
    cp = _run(["scontrol", "ping"], timeout=15, env=_clean_env())
    return cp.returncode == 0 and "UP" in cp.stdout


def _wait_ctld() -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _ctld_ping():
            return
        if not _pid_alive(CTLD_PID, "slurmctld"):
            time.sleep(0.5)
            if not _pid_alive(CTLD_PID, "slurmctld") and not _ctld_ping():
                raise SandboxError("slurmctld exited after starting\n" + _tail(CTLD_LOG))
        time.sleep(0.3)
    raise SandboxError("slurmctld did not answer `scontrol ping` within 60 s\n" + _tail(CTLD_LOG))


def _start_slurmd(node: str) -> None:
    if _pid_alive(_slurmd_pidfile(node), "slurmd"):
        return
    cp = _run(["/usr/sbin/slurmd", "-N", node], timeout=60, env=_clean_env())
    if cp.returncode != 0:
        raise SandboxError(f"slurmd -N {node} did not start: {cp.stderr.strip()}\n{_tail(_slurmd_log(node))}")


def _stop_slurmd(node: str) -> None:
    pid = _pid_alive(_slurmd_pidfile(node), "slurmd")
    if pid:
        _stop_pid(pid, timeout=30)


def _running_slurmd_nodes() -> list[str]:
    """Nodes whose slurmd runs, from the pid files (whatever layout started them)."""
    found = []
    for pidfile in sorted(RUN_DIR.glob("slurmd-*.pid")):
        node = pidfile.name[len("slurmd-"):-len(".pid")]
        if _pid_alive(pidfile, "slurmd"):
            found.append(node)
    return found


def _stop_all_slurmd() -> None:
    for node in _running_slurmd_nodes():
        _stop_slurmd(node)


def _sinfo_nodes() -> tuple[dict[str, str], dict[str, str], list[str], str | None, dict[str, str]]:
    """(node -> state, node -> gres, partitions, default partition, node -> reason) from one sinfo call."""
    cp = _run(["sinfo", "-N", "-h", "-o", "%N|%T|%G|%P|%E"], timeout=15, env=_clean_env())
    states: dict[str, str] = {}
    gres: dict[str, str] = {}
    reasons: dict[str, str] = {}
    parts: list[str] = []
    default = None
    if cp.returncode != 0:
        return states, gres, parts, default, reasons
    for line in cp.stdout.splitlines():
        bits = line.split("|")
        if len(bits) < 5:
            continue
        node, state, g, part, reason = bits[:5]
        states[node] = state
        gres[node] = g
        if reason and reason != "none":
            reasons[node] = reason
        if part.endswith("*"):
            part = part[:-1]
            default = part
        if part not in parts:
            parts.append(part)
    return states, gres, parts, default, reasons


def _wait_nodes(timeout: float = 60, nodes: list[str] | None = None) -> None:
    nodes = nodes or active_layout().nodes
    deadline = time.monotonic() + timeout
    resumed: set[str] = set()
    restarted = False
    states: dict[str, str] = {}
    reasons: dict[str, str] = {}
    while time.monotonic() < deadline:
        states, _, _, _, reasons = _sinfo_nodes()
        if set(states) == set(nodes) and all(_usable(s) for s in states.values()):
            return
        for node, state in states.items():
            base = state.rstrip("*~#!%$@^-+").lower()
            if base == "inval" and not restarted:
                # Nodes that registered INVAL need slurmctld restarted, not scontrol update.
                restarted = True
                _stop_slurmctld()
                _start_slurmctld()
                _wait_ctld()
                break
            if (base in ("down", "drained", "draining", "drain", "fail", "failing")
                    and not state.endswith("*") and node not in resumed):
                resumed.add(node)
                _run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=15, env=_clean_env())
        time.sleep(0.5)
    detail = ", ".join(f"{n}={s}" + (f" ({reasons[n]})" if n in reasons else "") for n, s in sorted(states.items()))
    logs = "\n".join(_tail(_slurmd_log(n), 8) for n in nodes[:4])
    raise SandboxError(
        f"nodes did not become idle within {timeout:.0f} s: {detail or 'sinfo shows none'}\n"
        f"{_tail(CTLD_LOG, 15)}\n{logs}"
    )


def _active_jobs() -> int:
    cp = _run(["squeue", "-h", "-o", "%i"], timeout=15, env=_clean_env())
    return len(cp.stdout.split()) if cp.returncode == 0 else 0
