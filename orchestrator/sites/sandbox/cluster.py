"""The sandbox cluster as a whole: ``up()``, ``down()``, ``status()``, ``restart_controller()``.

``up()`` puts the pieces of the other modules together in order: packages, the configuration
files (rendered from templates), munge, MariaDB, slurmdbd with the twin's accounts, slurmctld,
the slurmds, and waits until every node is usable and ``sacct`` answers. Everything here
needs root but ``status()``.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from orchestrator.sites.sandbox import facts
from orchestrator.sites.sandbox.accounting import _accounting_current, _apply_accounting, _remove_stale_qos
from orchestrator.sites.sandbox.configs import (
    _config_files,
    _configs_current,
    _dbd_conf,
    _ensure_fake_devices,
    _write_if_changed,
)
from orchestrator.sites.sandbox.daemons import (
    _active_jobs,
    _dirs,
    _ensure_cluster_registered,
    _running_slurmd_nodes,
    _sacct_ok,
    _sinfo_nodes,
    _slurmd_pidfile,
    _start_slurmctld,
    _start_slurmd,
    _start_slurmdbd,
    _stop_all_slurmd,
    _stop_slurmctld,
    _usable,
    _wait_ctld,
    _wait_dbd,
    _wait_nodes,
)
from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import (
    CLUSTER,
    CONF_DIR,
    CONF_MARK,
    CTLD_LOG,
    CTLD_PID,
    DBD_CONF,
    DBD_LOG,
    DBD_PID,
    ENFORCE,
    LAYOUT_FILE,
    LOG_DIR,
    MUNGE_PID,
    NODES,
    PLUGSTACK_CONF,
    SLURM_CONF,
    SPANK_DIR,
)
from orchestrator.sites.sandbox.layout import active_layout, plain_layout, twin_layout
from orchestrator.sites.sandbox.mariadb import _database_ready, _ensure_database, _ensure_mariadb, _mariadb_ok
from orchestrator.sites.sandbox.munge import _ensure_munge, _munge_ok
from orchestrator.sites.sandbox.packages import _ensure_packages
from orchestrator.sites.sandbox.proc import _clean_env, _pid_alive, _port_open, _require_root, _run, _stop_pid, _tail
from orchestrator.sites.sandbox.spank import _ensure_spank_ipus


@dataclass
class SandboxStatus:
    munge: bool = False
    mariadb: bool = False
    slurmdbd: bool = False
    slurmctld: bool = False
    slurmd: dict[str, bool] = field(default_factory=dict)  # node -> its slurmd process runs
    nodes: dict[str, str] = field(default_factory=dict)  # node -> state as sinfo says (idle, mixed, ...)
    gres: dict[str, str] = field(default_factory=dict)  # node -> gres as sinfo says (gpu:4)
    partitions: list[str] = field(default_factory=list)
    default_partition: str | None = None
    sacct_ok: bool = False
    cluster: str = CLUSTER
    config_dir: str = str(CONF_DIR)
    log_dir: str = str(LOG_DIR)
    slurm_version: str | None = None
    # How a job over --mem is stopped: "cgroup" (kernel OOM killer; sacct OUT_OF_MEMORY)
    # or "jobacct" (RSS sampling kills it; sacct FAILED, signal 9). None: not configured.
    memory_enforcement: str | None = None
    # The site this cluster is a twin of (``up(like=...)``); None: the plain sandbox.
    twin: str | None = None
    twin_targets: list[str] = field(default_factory=list)  # site[:system] profiles the twin covers
    accounts: list[str] = field(default_factory=list)  # the twin's accounts (root is associated)
    qos: list[str] = field(default_factory=list)  # the twin's QoS names jobs may ask for
    enforce: str | None = None  # AccountingStorageEnforce (twins only)
    ipus: bool = False  # the --ipus SPANK stand-in is loaded (Graphcore twin)
    notes: list[str] = field(default_factory=list)  # what the twin assumed or scaled down
    problems: list[str] = field(default_factory=list)
    expected_nodes: list[str] = field(default_factory=lambda: list(NODES))

    @property
    def ok(self) -> bool:
        """Everything runs, every node is usable and accounting answers."""
        return (
            self.munge
            and self.slurmdbd
            and self.slurmctld
            and self.sacct_ok
            and set(self.nodes) == set(self.expected_nodes)
            and all(_usable(s) for s in self.nodes.values())
            and all(self.slurmd.get(n, False) for n in self.expected_nodes)
        )

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "munge": self.munge,
            "mariadb": self.mariadb,
            "slurmdbd": self.slurmdbd,
            "slurmctld": self.slurmctld,
            "slurmd": dict(self.slurmd),
            "nodes": dict(self.nodes),
            "gres": dict(self.gres),
            "partitions": list(self.partitions),
            "default_partition": self.default_partition,
            "sacct_ok": self.sacct_ok,
            "cluster": self.cluster,
            "config_dir": self.config_dir,
            "log_dir": self.log_dir,
            "slurm_version": self.slurm_version,
            "memory_enforcement": self.memory_enforcement,
            "twin": self.twin,
            "twin_targets": list(self.twin_targets),
            "accounts": list(self.accounts),
            "qos": list(self.qos),
            "enforce": self.enforce,
            "ipus": self.ipus,
            "notes": list(self.notes),
            "problems": list(self.problems),
        }


def status() -> SandboxStatus:
    """What runs now; changes nothing."""
    st = SandboxStatus()
    env = _clean_env()
    layout = active_layout()
    st.expected_nodes = layout.nodes
    st.twin = layout.twin
    if layout.twin:
        st.twin_targets = list(layout.targets)
        st.accounts = list(layout.accounts)
        st.qos = list(layout.qos)
        st.enforce = ENFORCE
        st.notes = list(layout.notes)
        try:
            st.ipus = bool(layout.ipus_max) and f"{SPANK_DIR / 'orch_twin_ipus.so'}" in PLUGSTACK_CONF.read_text()
        except OSError:
            st.ipus = False
    st.munge = bool(_pid_alive(MUNGE_PID, "munged")) and (shutil.which("munge") is not None) and _munge_ok()
    st.mariadb = _mariadb_ok() if os.geteuid() == 0 else _port_open(3306)
    st.slurmdbd = bool(_pid_alive(DBD_PID, "slurmdbd"))
    st.slurmctld = bool(_pid_alive(CTLD_PID, "slurmctld"))
    st.slurmd = {n: bool(_pid_alive(_slurmd_pidfile(n), "slurmd")) for n in layout.nodes}
    try:
        conf = SLURM_CONF.read_text()
        if CONF_MARK in conf:
            st.memory_enforcement = "cgroup" if "TaskPlugin=task/cgroup" in conf else "jobacct"
    except OSError:
        pass
    if shutil.which("sinfo"):
        ver = _run(["sinfo", "--version"], timeout=10, env=env)
        st.slurm_version = ver.stdout.strip().split()[-1] if ver.stdout.strip() else None
        if st.slurmctld:
            st.nodes, st.gres, st.partitions, st.default_partition, reasons = _sinfo_nodes()
            for n, r in reasons.items():
                st.problems.append(f"node {n} is {st.nodes.get(n)}: {r}")
        if st.slurmdbd:
            st.sacct_ok = _sacct_ok()
    if not st.munge:
        st.problems.append("munged is not running")
    if not st.slurmdbd:
        st.problems.append("slurmdbd is not running")
    elif not st.sacct_ok:
        st.problems.append("sacct does not answer")
    if not st.slurmctld:
        st.problems.append("slurmctld is not running")
    for n, alive in st.slurmd.items():
        if not alive:
            st.problems.append(f"slurmd for {n} is not running")
    return st


def up(like: str | None = None, env: Mapping[str, str] | None = None, force: bool = False,
       sites_dirs: list[Path] | None = None) -> SandboxStatus:
    """Bring the sandbox cluster up (idempotent); return its status or raise SandboxError.

    ``like``: configure it as a twin of that site (``site`` or ``site:system``: the twin holds
    every Slurm system of the site); account and QoS names come from ``env`` (default the
    process's environment). Without ``like`` the plain sandbox (partitions debug and batch, no
    enforcement) is restored. Switching to a twin while jobs are queued or running is refused
    unless ``force`` (their partitions may vanish); restoring the plain sandbox always proceeds.
    """
    _require_root()
    mode = facts._memory_mode()
    layout = plain_layout() if like is None else twin_layout(like, env, sites_dirs)
    # Fast path: nothing to do.
    if _configs_current(mode, layout):
        st = status()
        if st.ok and (not layout.enforce or _accounting_current(layout)):
            return st

    files = _config_files(mode, layout)
    try:
        switching = any((path.read_text() if path.exists() else None) != text for path, text in files.items())
    except OSError:
        switching = True
    if like is not None and switching and not force and _pid_alive(CTLD_PID, "slurmctld") and _active_jobs():
        raise SandboxError(
            f"{_active_jobs()} job(s) are queued or running on the sandbox (squeue); switching it to a twin of "
            f"{layout.twin} would change its partitions under them. Wait for them, cancel them (scancel), or "
            "force the switch (orch sandbox up --like SITE --force)")

    _ensure_packages()
    _dirs(layout.nodes)
    _ensure_fake_devices(layout)
    if layout.ipus_max:
        _ensure_spank_ipus()
    slurm_changed = False
    for path, text in files.items():
        if text is None:
            if path.exists():
                path.unlink()
                slurm_changed = True
        else:
            slurm_changed |= _write_if_changed(path, text)
    dbd_changed = _write_if_changed(DBD_CONF, _dbd_conf(), mode=0o600)

    _ensure_munge()
    _ensure_mariadb()
    if not _database_ready():
        _ensure_database()

    if dbd_changed:
        pid = _pid_alive(DBD_PID, "slurmdbd")
        if pid:
            _stop_pid(pid)
    _start_slurmdbd()
    _wait_dbd()
    registered_now = _ensure_cluster_registered()
    _apply_accounting(layout)

    if slurm_changed or registered_now or set(_running_slurmd_nodes()) - set(layout.nodes):
        # New node/partition definitions need daemons restarted, not reconfigured.
        _stop_all_slurmd()
        _stop_slurmctld()
    _write_if_changed(LAYOUT_FILE, layout.to_json() + "\n")
    _start_slurmctld()
    _wait_ctld()
    for n in layout.nodes:
        _start_slurmd(n)
    _wait_nodes(timeout=60 + 2 * len(layout.nodes), nodes=layout.nodes)
    _remove_stale_qos(layout)

    deadline = time.monotonic() + 30
    while not _sacct_ok():
        if time.monotonic() > deadline:
            raise SandboxError("sacct does not answer although slurmdbd runs\n" + _tail(DBD_LOG) + "\n"
                               + _tail(CTLD_LOG))
        time.sleep(0.5)
    st = status()
    if not st.ok:
        raise SandboxError("sandbox came up incompletely: " + "; ".join(st.problems or ["nodes not usable"]))
    return st


def down() -> None:
    """Stop the Slurm daemons and munged (MariaDB keeps running). Job state is kept on disk."""
    _require_root()
    _stop_all_slurmd()
    _stop_slurmctld()
    pid = _pid_alive(DBD_PID, "slurmdbd")
    if pid:
        _stop_pid(pid)
    pid = _pid_alive(MUNGE_PID, "munged")
    if pid:
        _stop_pid(pid)


def restart_controller(wait: bool = True) -> None:
    """Stop and start slurmctld (state is kept: queued and running jobs survive)."""
    _require_root()
    _stop_slurmctld()
    _start_slurmctld()
    if wait:
        _wait_ctld()
        _wait_nodes()
