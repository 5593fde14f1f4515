"""Accounts and QoS of a twin in slurmdbd (``sacctmgr``).

A twin enforces associations, limits and QoS (``AccountingStorageEnforce``), so slurmdbd
must hold the site's account and QoS names before slurmctld reads a slurm.conf naming them.
"""

from __future__ import annotations

import subprocess
from typing import Any

from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import CLUSTER, DBD_LOG, PARTITION_QOS_PREFIX
from orchestrator.sites.sandbox.layout import PartitionQos, TwinLayout, active_layout
from orchestrator.sites.sandbox.proc import _clean_env, _run, _tail


def _sacctmgr(*args: str) -> subprocess.CompletedProcess:
    cp = _run(["sacctmgr", "-i", *args], timeout=30, env=_clean_env())
    text = cp.stdout + cp.stderr
    if cp.returncode != 0 and "Nothing new added" not in text and "Nothing modified" not in text \
            and "Nothing deleted" not in text:
        raise SandboxError(f"sacctmgr {' '.join(args)} failed ({cp.returncode}): {text.strip()}\n{_tail(DBD_LOG, 10)}")
    return cp


def _accounting_state() -> dict[str, Any]:
    """What slurmdbd holds for this cluster: accounts root is in and its QoS, and the QoS table."""
    env = _clean_env()
    assoc = _run(["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={CLUSTER}", "user=root",
                  "format=account,qos"], timeout=15, env=env)
    qos = _run(["sacctmgr", "-n", "-P", "show", "qos", "format=name,maxtres,maxjobspu,maxsubmitpu,flags"],
               timeout=15, env=env)
    accounts: dict[str, list[str]] = {}
    for line in assoc.stdout.splitlines():
        if "|" in line:
            account, q = line.split("|", 1)
            accounts[account] = sorted(x for x in q.split(",") if x)
    table: dict[str, list[str]] = {}
    for line in qos.stdout.splitlines():
        bits = line.split("|")
        if len(bits) >= 5:
            table[bits[0]] = bits[1:5]
    return {"accounts": accounts, "qos": table}


def _wanted_root_qos(layout: TwinLayout) -> list[str]:
    return sorted({"normal", *layout.qos})


def _partition_qos_row(pq: PartitionQos) -> list[str]:
    return [pq.max_tres_per_job or "", str(pq.max_jobs_per_user or ""), str(pq.max_submit_per_user or ""),
            "DenyOnLimit"]


def _stale_accounts(layout: TwinLayout, state: dict[str, Any]) -> list[str]:
    """Accounts an earlier twin created (as recorded in its layout) that this layout does not want."""
    earlier = set(active_layout().accounts)
    return sorted(a for a in state["accounts"] if a in earlier and a not in layout.accounts and a != "root")


def _accounting_current(layout: TwinLayout, state: dict[str, Any] | None = None) -> bool:
    state = state or _accounting_state()
    accounts = state["accounts"]
    want = _wanted_root_qos(layout)
    if not {"root", *layout.accounts} <= set(accounts) or _stale_accounts(layout, state):
        return False
    if any(accounts[a] != want for a in ("root", *layout.accounts)):
        return False
    table = state["qos"]
    for pq in layout.partition_qos:
        if table.get(pq.name) != _partition_qos_row(pq):
            return False
    return all(q in table for q in layout.qos) and not any(
        name.startswith(PARTITION_QOS_PREFIX) and name not in {pq.name for pq in layout.partition_qos}
        for name in table)


def _apply_accounting(layout: TwinLayout) -> None:
    """Make slurmdbd hold the layout's accounts (root associated to each, with the layout's QoS).

    QoS and accounts are created before slurmctld reads a slurm.conf naming them; what the
    earlier twin created (its accounts, as its recorded layout says; its partition QoS) is
    removed, so that a twin never accepts another site's account. Accounts orch did not make
    are left alone.
    """
    state = _accounting_state()
    if _accounting_current(layout, state):
        return
    table = state["qos"]
    new_qos = [q for q in [*layout.qos, *(pq.name for pq in layout.partition_qos)] if q not in table]
    if new_qos:
        _sacctmgr("add", "qos", ",".join(new_qos))
    for pq in layout.partition_qos:
        if table.get(pq.name) != _partition_qos_row(pq):
            # sacctmgr clears a TRES limit TRES by TRES (`gres/gpu=-1`); a bare -1 is refused
            # ("no TRES id found for -1"), so a limit the new layout lacks is cleared by name.
            current = (table.get(pq.name) or [""])[0]
            tres = pq.max_tres_per_job or ",".join(f"{item.split('=')[0]}=-1"
                                                   for item in current.split(",") if "=" in item)
            _sacctmgr("modify", "qos", "where", f"name={pq.name}", "set",
                      *([f"MaxTRESPerJob={tres}"] if tres else []),
                      f"MaxJobsPerUser={pq.max_jobs_per_user or -1}",
                      f"MaxSubmitJobsPerUser={pq.max_submit_per_user or -1}", "Flags=DenyOnLimit")
    for account in layout.accounts:
        if account not in state["accounts"]:
            _sacctmgr("add", "account", account, f"cluster={CLUSTER}",
                      f"Description=orch twin of {layout.twin}", f"Organization={layout.twin}")
            _sacctmgr("add", "user", "root", f"account={account}", f"cluster={CLUSTER}")
    for account in _stale_accounts(layout, state):
        _sacctmgr("delete", "user", "where", "name=root", f"account={account}", f"cluster={CLUSTER}")
        # The account itself (no cluster clause: an account without associations is gone for good).
        _run(["sacctmgr", "-i", "delete", "account", "where", f"name={account}"], timeout=30, env=_clean_env())
    _sacctmgr("modify", "user", "where", "name=root", f"cluster={CLUSTER}", "set",
              f"qos={','.join(_wanted_root_qos(layout))}", "defaultqos=normal")


def _remove_stale_qos(layout: TwinLayout) -> None:
    """Partition QoS of an earlier twin (after slurmctld stopped naming them)."""
    keep = {pq.name for pq in layout.partition_qos}
    stale = [n for n in _accounting_state()["qos"] if n.startswith(PARTITION_QOS_PREFIX) and n not in keep]
    if stale:
        _sacctmgr("delete", "qos", "where", f"name={','.join(stale)}")
