"""A real Slurm cluster on this one machine, for tests and for trying orch out.

``up()`` installs what is missing (Debian packages), writes the configuration
under ``/etc/slurm``, and starts munged, slurmdbd (on MariaDB), slurmctld and
four ``slurmd`` processes that play the virtual nodes ``n1``..``n4`` (each with
four fake GPUs as ``gres/gpu``). Afterwards ``sinfo``, ``sbatch``, ``srun``,
``sacct`` and ``scancel`` work from any shell. ``down()`` stops the Slurm daemons
and munged (MariaDB is left alone: other programs may use it); ``status()``
reports what runs without changing anything.

Site twins: ``up(like="dawn")`` reconfigures the same cluster as a twin of a site
profile (:func:`twin_layout`): the site's partitions (an ``implicit`` queue becomes
the twin's default partition) with the profile's MaxTime / MaxNodes / MinNodes,
device and job limits as a partition QoS (``Flags=DenyOnLimit``, so over-limit
jobs are refused at submission as on the site), the nodes' gres (``gpu``, ``rdu``,
...), CPUs, memory and features as the profile gives them (``SlurmdParameters=
config_overrides`` lets 4 slurmds on a 2-core host claim 144 CPUs and 512 GB), and
in slurmdbd the site's account (from the environment variable the profile names,
or a stand-in when that is unset and the site requires one) and QoS names, with
``AccountingStorageEnforce=associations,limits,qos``. Graphcore's ``--ipus`` is no
option of a stock Slurm; the twin loads a small SPANK plugin that adds it and
checks the count (see :data:`SPANK_IPUS_SOURCE`). ``up()`` without ``like``
restores the plain sandbox; ``status().twin`` says which twin is active.

Everything here needs root. The daemons outlive the Python process that started
them; ``up()`` is idempotent (a second call only checks, in well under a second).

Facts a site profile needs (``sites/sandbox.yaml``) are in :data:`FACTS`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from orchestrator.errors import UserError

__all__ = [
    "FACTS",
    "SandboxError",
    "SandboxStatus",
    "TwinLayout",
    "active_layout",
    "down",
    "restart_controller",
    "status",
    "twin_layout",
    "up",
]

# --------------------------------------------------------------------------------------
# Layout and fixed facts
# --------------------------------------------------------------------------------------

CLUSTER = "sandbox"
CONF_DIR = Path("/etc/slurm")
SLURM_CONF = CONF_DIR / "slurm.conf"
GRES_CONF = CONF_DIR / "gres.conf"
CGROUP_CONF = CONF_DIR / "cgroup.conf"
DBD_CONF = CONF_DIR / "slurmdbd.conf"
STATE_DIR = Path("/var/lib/orch-slurm")
LOG_DIR = Path("/var/log/orch-slurm")
RUN_DIR = Path("/run/orch-slurm")
CTLD_PID = RUN_DIR / "slurmctld.pid"
DBD_PID = RUN_DIR / "slurmdbd.pid"
CTLD_LOG = LOG_DIR / "slurmctld.log"
DBD_LOG = LOG_DIR / "slurmdbd.log"
MUNGE_PID = Path("/run/munge/munged.pid")
MUNGE_LOG = Path("/var/log/munge/munged.log")
MUNGE_KEY = Path("/etc/munge/munge.key")

NODES = ("n1", "n2", "n3", "n4")
NODE_SPEC = "n[1-4]"
GPUS_PER_NODE = 4
# Distinct existing device files stand in for GPUs (gres needs a File per device).
FAKE_GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")
SLURMD_BASE_PORT = 17001
CTLD_PORT = 6817
DBD_PORT = 6819
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
DB_PASS = "orch-sandbox"  # bound to 127.0.0.1 only; a sandbox, not a secret
MAX_ARRAY_SIZE = 1001  # array indices 0..1000
MAX_JOB_COUNT = 20000
PARTITIONS = {
    # name: (max walltime, default walltime, default partition?)
    "debug": ("01:00:00", "00:30:00", True),
    "batch": ("1-00:00:00", "01:00:00", False),
}
CONF_MARK = "# Written by orch.sandbox; orch sandbox up rewrites it."

# Site twins (``up(like=SITE)``).
# The twin's own SPANK stack (PlugStackConfig in a twin's slurm.conf; the plain sandbox keeps
# Slurm's default /etc/slurm/plugstack.conf, which Debian ships).
PLUGSTACK_CONF = CONF_DIR / "orch-twin-plugstack.conf"
LAYOUT_FILE = STATE_DIR / "layout.json"  # the layout the files in /etc/slurm were written for
FAKEDEV_DIR = STATE_DIR / "fakedev"  # stand-in device files for more than 4 fake GPUs per node
SPANK_DIR = STATE_DIR / "spank"
TWIN_MAX_NODES = 16  # virtual nodes per node group (one group per Slurm system of the site)
TWIN_MAX_TOTAL_NODES = 32
# Memory a twin's node claims per CPU when its profile gives no node.memory_gb.
TWIN_DEFAULT_MEM_PER_CPU_MB = 2048
# Accounts and QoS the twin creates when the site needs one and the environment names none.
STAND_IN_ACCOUNT = "orch-twin"
STAND_IN_QOS = "orch-twin"
PARTITION_QOS_PREFIX = "orch-twin-part-"
ENFORCE = "associations,limits,qos"

PACKAGES = ("slurm-wlm", "slurmdbd", "munge")
# Packages needed only when no MariaDB answers.
DB_PACKAGES = ("mariadb-server", "mariadb-client")

UP_TIMEOUT_S = 120.0


def _cpus_per_node() -> int:
    return max(2, os.cpu_count() or 2)


def _host_mem_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 8192


def _node_mem_mb() -> int:
    # The four virtual nodes share the host: together they claim 80% of it.
    return max(1024, int(_host_mem_mb() * 0.8 / len(NODES)))


def _facts() -> dict:
    cpus = _cpus_per_node()
    mem = _node_mem_mb()
    return {
        "cluster": CLUSTER,
        "scheduler": "slurm",
        "nodes": list(NODES),
        "node_count": len(NODES),
        "cpus_per_node": cpus,
        "memory_mb_per_node": mem,
        "default_mem_per_cpu_mb": mem // cpus,
        "gres": f"gpu:{GPUS_PER_NODE}",
        "gpus_per_node": GPUS_PER_NODE,
        "partitions": {
            name: {"max_walltime": mx, "default_walltime": dflt, "default": d, "nodes": len(NODES)}
            for name, (mx, dflt, d) in PARTITIONS.items()
        },
        "default_partition": next(n for n, p in PARTITIONS.items() if p[2]),
        # MaxArraySize=1001 allows indices 0..1000, so arrays of up to 1001 tasks.
        "max_array_size": MAX_ARRAY_SIZE,
        "max_job_count": MAX_JOB_COUNT,
        "accounting": True,
        "memory_enforcement": "cgroup (task/cgroup, OUT_OF_MEMORY) where cgroup v1 memory is writable, else jobacct (OverMemoryKill)",
    }


FACTS = _facts()


class SandboxError(UserError, RuntimeError):
    """The sandbox cluster could not be brought up (the message says what and shows logs).

    A UserError so that the CLI prints the message (and log tails) without a traceback.
    """

    exit_code = 1


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


_USABLE_STATES = {"idle", "mixed", "allocated", "completing"}


def _usable(state: str) -> bool:
    return state.rstrip("*~#!%$@^-+").lower() in _USABLE_STATES and not state.endswith("*")


# --------------------------------------------------------------------------------------
# Layouts: the plain sandbox, or a twin of a site profile
# --------------------------------------------------------------------------------------


@dataclass
class NodeGroup:
    """Consecutive virtual nodes ``n<first>``.. of one kind (one Slurm system of a site)."""

    label: str
    first: int
    count: int
    cpus: int
    memory_mb: int
    gres: dict[str, int] = field(default_factory=dict)  # name -> count per node (gpu: 4, rdu: 8)
    features: list[str] = field(default_factory=list)
    describe: str = ""

    @property
    def names(self) -> list[str]:
        return [f"n{i}" for i in range(self.first, self.first + self.count)]

    @property
    def spec(self) -> str:
        last = self.first + self.count - 1
        return f"n{self.first}" if self.count == 1 else f"n[{self.first}-{last}]"


@dataclass
class PartitionSpec:
    name: str
    groups: list[str]  # NodeGroup labels
    default: bool = False
    max_time: str = "UNLIMITED"
    default_time: str | None = None
    max_nodes: int | None = None
    min_nodes: int = 1
    qos: str | None = None  # the partition QoS that carries the queue's job limits
    allow_qos: list[str] = field(default_factory=list)  # a required QoS (Stanage gpu-h100: gpu)
    site_queue: str | None = None  # the profile's queue name
    implicit: bool = False  # the site's default partition, which scripts do not name


@dataclass
class PartitionQos:
    name: str
    max_tres_per_job: str | None = None
    max_jobs_per_user: int | None = None
    max_submit_per_user: int | None = None


@dataclass
class TwinLayout:
    """What the cluster is configured as: the plain sandbox (``twin`` None) or a site's twin."""

    twin: str | None
    groups: list[NodeGroup]
    partitions: list[PartitionSpec]
    accounts: list[str] = field(default_factory=list)
    qos: list[str] = field(default_factory=list)  # QoS names jobs may ask for (besides normal)
    partition_qos: list[PartitionQos] = field(default_factory=list)
    ipus_max: int | None = None  # load the --ipus SPANK stand-in, counts up to this
    targets: list[str] = field(default_factory=list)  # site[:system] profiles the twin covers
    no_twin: dict[str, str] = field(default_factory=dict)  # site:system -> why it has no twin here
    notes: list[str] = field(default_factory=list)

    @property
    def enforce(self) -> bool:
        return self.twin is not None

    @property
    def nodes(self) -> list[str]:
        return [n for g in self.groups for n in g.names]

    def group(self, label: str) -> NodeGroup:
        return next(g for g in self.groups if g.label == label)

    def partition(self, name: str) -> PartitionSpec | None:
        return next((p for p in self.partitions if p.name == name), None)

    def partition_nodes(self, name: str) -> int:
        part = self.partition(name)
        return sum(self.group(g).count for g in part.groups) if part else 0

    def default_partition(self) -> PartitionSpec | None:
        return next((p for p in self.partitions if p.default), None)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TwinLayout":
        return cls(
            twin=data.get("twin"),
            groups=[NodeGroup(**g) for g in data.get("groups", [])],
            partitions=[PartitionSpec(**p) for p in data.get("partitions", [])],
            accounts=list(data.get("accounts", [])),
            qos=list(data.get("qos", [])),
            partition_qos=[PartitionQos(**q) for q in data.get("partition_qos", [])],
            ipus_max=data.get("ipus_max"),
            targets=list(data.get("targets", [])),
            no_twin=dict(data.get("no_twin", {})),
            notes=list(data.get("notes", [])),
        )


def plain_layout() -> TwinLayout:
    groups = [NodeGroup("sandbox", 1, len(NODES), _cpus_per_node(), _node_mem_mb(), {"gpu": GPUS_PER_NODE})]
    parts = [PartitionSpec(name, ["sandbox"], default=d, max_time=mx, default_time=dflt, max_nodes=None,
                           site_queue=name)
             for name, (mx, dflt, d) in PARTITIONS.items()]
    return TwinLayout(twin=None, groups=groups, partitions=parts, targets=["sandbox"])


def active_layout() -> TwinLayout:
    """The layout /etc/slurm was last written for by ``up()`` (plain when none was recorded)."""
    try:
        if CONF_MARK in SLURM_CONF.read_text():
            return TwinLayout.from_dict(json.loads(LAYOUT_FILE.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    return plain_layout()


def _slurm_time(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    hms = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{hms}" if days else hms


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def _mem_mb(text: str | None) -> int:
    """Slurm memory size (``82G``, ``4000``, ``1T``) in MB; 0 when empty or unparsable."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*", str(text or ""), re.IGNORECASE)
    if not match:
        return 0
    return int(float(match.group(1)) * _MEM_UNITS[(match.group(2) or "M").upper()])


def _partition_name(queue_name: str, implicit: bool) -> str:
    # "PartitionName=DEFAULT" sets defaults for other partitions in slurm.conf (any case).
    if implicit and queue_name.lower() == "default":
        return "site-default"
    if queue_name.lower() == "default":
        return "default-queue"
    return queue_name


def site_targets(site: str, sites_dirs: list[Path] | None = None) -> tuple[str, list[tuple[str, Any]]]:
    """(site name, [(target, profile)]): the site itself and each of its systems, systems that
    merely repeat the site's own profile (AI Testbed ``sambanova: {}``) named once, by system."""
    from orchestrator.sites.profiles import load_site

    name = site.partition(":")[0]
    base = load_site(name, sites_dirs)
    systems = [(f"{name}:{s}", load_site(f"{name}:{s}", sites_dirs)) for s in base.systems]

    def essence(profile: Any) -> dict[str, Any]:
        return profile.model_dump(exclude={"name", "system", "description", "systems"})

    if any(essence(p) == essence(base) for _, p in systems):
        return name, systems
    return name, [(name, base), *systems]


def twin_layout(site: str, env: Mapping[str, str] | None = None,
                sites_dirs: list[Path] | None = None) -> TwinLayout:
    """The twin of ``site`` (``site:system`` means the same site): every Slurm system of its
    profile becomes a group of virtual nodes, every queue a partition with the queue's limits.

    ``env`` (default ``os.environ``) gives the account and QoS names, from the variables the
    profile names; a site that requires one gets a stand-in (``orch-twin``) when they are unset.
    """
    env = os.environ if env is None else env
    try:
        name, targets = site_targets(site, sites_dirs)
    except UserError as exc:
        raise SandboxError(str(exc)) from None
    no_twin = {t: ("PBS Pro: no PBS server can run here (orch's PBS executor is tested against an emulator)"
                   if p.scheduler == "pbs" else
                   f"{p.scheduler}: no batch scheduler, so no twin" if p.scheduler in ("appliance", "local") else
                   f"scheduler {p.scheduler}: no twin")
               for t, p in targets if p.scheduler != "slurm"}
    slurm = [(t, p) for t, p in targets if p.scheduler == "slurm"]
    if not slurm:
        raise SandboxError(f"site {name} has no Slurm system, so no twin: " + "; ".join(
            f"{t}: {why}" for t, why in no_twin.items()))

    groups: list[NodeGroup] = []
    notes: list[str] = []
    parts: dict[str, dict[str, Any]] = {}
    accounts: list[str] = []
    qos: list[str] = []
    ipus_max: int | None = None
    first = 1
    for target, prof in slurm:
        dev, res, node = prof.device, prof.resources, prof.node
        queue_nodes = max(q.max_nodes for q in prof.queues)
        count = max(1, min(TWIN_MAX_NODES, prof.max_nodes, queue_nodes))
        if count < min(prof.max_nodes, queue_nodes):
            notes.append(f"{target}: {count} virtual nodes stand for up to {min(prof.max_nodes, queue_nodes)}")
        cards = math.ceil(dev.per_node / dev.per_card)
        full_cpus = (res.cpus_per_device or 1) * dev.per_node
        if node.cpus:
            cpus = node.cpus
        else:
            cpus = max(full_cpus, dev.per_node, _cpus_per_node())
            notes.append(f"{target}: the profile gives no node.cpus; the twin's nodes claim {cpus}")
        if node.memory_gb:
            memory = int(node.memory_gb * 1024)
        else:
            memory = max(_node_mem_mb(), _mem_mb(res.mem), _mem_mb(res.mem_per_device) * cards,
                         TWIN_DEFAULT_MEM_PER_CPU_MB * cpus)
            notes.append(f"{target}: the profile gives no node.memory_gb; the twin's nodes claim {memory} MB")
        gres: dict[str, int] = {}
        if res.gpu_request == "ipus":
            ipus_max = max(ipus_max or 0, dev.per_node * prof.max_nodes)
        elif res.gpu_request == "gres":
            gres[res.gres_name] = cards
        elif dev.type != "cpu":
            gres["gpu"] = cards  # --gpus*: gres/gpu; no request (COSMA8): the layout all the same
        # A constraint names node features (``a100_80``; in expressions ``a&b``, ``a|b``, ``[a*2&b]``).
        features = sorted({f for f in re.findall(r"[A-Za-z_][\w.-]*", res.constraint or "")})
        describe = (f"{dev.per_node}x {dev.model}" + (f" ({cards} cards)" if cards != dev.per_node else "")
                    + f", {cpus} CPUs, {memory // 1024} GB" + (f", features {','.join(features)}" if features else ""))
        group = NodeGroup(target, first, count, cpus, memory, gres, features, describe)
        groups.append(group)
        first += count

        account = prof.account.account(env)
        if account is None and prof.account.required:
            account = prof.account.account({prof.account.env: STAND_IN_ACCOUNT})
            notes.append(f"{target}: ${prof.account.env} is unset; stand-in account {account}")
        if account and account not in accounts:
            accounts.append(account)
        user_qos = prof.account.qos(env)
        if user_qos is None and prof.account.qos_required:
            user_qos = STAND_IN_QOS
            notes.append(f"{target}: ${prof.account.qos_env} is unset; stand-in QoS {user_qos}")
        if user_qos and user_qos not in qos:
            qos.append(user_qos)

        gres_name = next(iter(gres), None)
        for q in prof.queues:
            pname = _partition_name(q.name, q.implicit)
            entry = parts.setdefault(pname, {
                "groups": [], "implicit": q.implicit, "site_queue": q.name, "max_nodes": 0, "min_nodes": q.min_nodes,
                "max_time": 0, "allow_qos": set(), "open_qos": False, "max_cards": 0, "unlimited_devices": False,
                "jobs": 0, "unlimited_jobs": False, "submit": 0, "unlimited_submit": False, "gres": gres_name,
            })
            if target not in entry["groups"]:
                entry["groups"].append(target)
            entry["max_nodes"] = max(entry["max_nodes"], q.max_nodes)
            entry["min_nodes"] = min(entry["min_nodes"], q.min_nodes)
            entry["max_time"] = max(entry["max_time"], q.max_walltime_s)
            if q.qos:
                entry["allow_qos"].add(q.qos)
                if q.qos not in qos:
                    qos.append(q.qos)
            else:
                entry["open_qos"] = True
            if q.max_devices is None:
                entry["unlimited_devices"] = True
            else:
                entry["max_cards"] = max(entry["max_cards"], math.ceil(q.max_devices / dev.per_card))
            if q.max_jobs_per_user is None:
                entry["unlimited_jobs"] = True
            else:
                entry["jobs"] = max(entry["jobs"], q.max_jobs_per_user)
            if q.max_queued_per_user is None:
                entry["unlimited_submit"] = True
            else:
                entry["submit"] = max(entry["submit"], q.max_queued_per_user)
            entry["gres"] = entry["gres"] or gres_name

    total = sum(g.count for g in groups)
    if total > TWIN_MAX_TOTAL_NODES:
        raise SandboxError(f"a twin of {name} would need {total} virtual nodes (at most {TWIN_MAX_TOTAL_NODES})")

    partitions: list[PartitionSpec] = []
    partition_qos: list[PartitionQos] = []
    for pname, e in parts.items():
        pq = None
        tres = (f"gres/{e['gres']}={e['max_cards']}" if e["gres"] and not e["unlimited_devices"] and e["max_cards"]
                else None)
        jobs = None if e["unlimited_jobs"] else e["jobs"]
        submit = None if e["unlimited_submit"] else e["submit"]
        if tres or jobs or submit:
            pq = PartitionQos(PARTITION_QOS_PREFIX + pname, tres, jobs, submit)
            partition_qos.append(pq)
        partitions.append(PartitionSpec(
            name=pname, groups=e["groups"], default=False, max_time=_slurm_time(e["max_time"]),
            max_nodes=e["max_nodes"], min_nodes=e["min_nodes"], qos=pq.name if pq else None,
            allow_qos=[] if e["open_qos"] else sorted(e["allow_qos"]), site_queue=e["site_queue"],
            implicit=e["implicit"]))
    if ipus_max and not (shutil.which("cc") or shutil.which("gcc")):
        notes.append("no C compiler to build the --ipus SPANK stand-in: the twin refuses --ipus like any "
                     "stock Slurm, and `orch sites check` reports it as not verifiable here")
        ipus_max = None
    default = next((p for p in partitions if p.implicit), partitions[0])
    default.default = True
    return TwinLayout(twin=name, groups=groups, partitions=partitions, accounts=accounts, qos=qos,
                      partition_qos=partition_qos, ipus_max=ipus_max, targets=[t for t, _ in slurm],
                      no_twin=no_twin, notes=notes)


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def _run(cmd: list[str], timeout: float = 30, check: bool = False, env: dict | None = None,
         input: str | None = None) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, input=input)
    except FileNotFoundError as e:
        cp = subprocess.CompletedProcess(cmd, 127, "", str(e))
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        cp = subprocess.CompletedProcess(cmd, 124, out, f"timed out after {timeout}s")
    if check and cp.returncode != 0:
        raise SandboxError(
            f"command failed ({cp.returncode}): {' '.join(cmd)}\n{(cp.stdout or '')[-2000:]}{(cp.stderr or '')[-2000:]}"
        )
    return cp


def _clean_env() -> dict:
    # Commands run here must not see the variables of a job we might be running inside.
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"--- last {min(n, len(lines))} lines of {path} ---\n" + "\n".join(lines[-n:])


def _pid_alive(pidfile: Path, comm: str) -> int | None:
    """Pid from the pid file if that process runs and is ``comm``; else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        actual = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if not comm.startswith(actual) and not actual.startswith(comm[:15]):
        return None
    return pid


def _slurmd_pidfile(node: str) -> Path:
    return RUN_DIR / f"slurmd-{node}.pid"


def _slurmd_log(node: str) -> Path:
    return LOG_DIR / f"slurmd-{node}.log"


def _stop_pid(pid: int, timeout: float = 15) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return
        try:
            # Reap it if it is our child (it is not, when daemonised; harmless).
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            if state == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _require_root() -> None:
    if os.geteuid() != 0:
        raise SandboxError(
            "the Slurm sandbox needs root (it installs packages, writes /etc/slurm and starts "
            "munged, slurmdbd, slurmctld and slurmd); run `orch sandbox up` as root"
        )


def _hostname() -> str:
    return socket.gethostname().split(".")[0]


# --------------------------------------------------------------------------------------
# Configuration text
# --------------------------------------------------------------------------------------


def _cgroup_v1_memory_usable() -> bool:
    """Whether this machine has a writable cgroup v1 memory controller that enforces limits.

    Slurm 22.05's cgroup/v1 plugin needs /sys/fs/cgroup/{memory,freezer,...} as v1
    hierarchies; containers often have none, or a read-only one.
    """
    mem = Path("/sys/fs/cgroup/memory")
    if not (mem / "memory.limit_in_bytes").exists() or not Path("/sys/fs/cgroup/freezer/tasks").exists():
        return False
    probe = mem / f"orch-probe-{os.getpid()}"
    try:
        probe.mkdir()
        try:
            (probe / "memory.limit_in_bytes").write_text(str(64 * 1024 * 1024))
            return int((probe / "memory.limit_in_bytes").read_text()) <= 64 * 1024 * 1024
        finally:
            probe.rmdir()
    except OSError:
        return False


def _memory_mode() -> str:
    """How jobs over --mem are stopped: "cgroup" (kernel OOM killer, sacct OUT_OF_MEMORY)
    or "jobacct" (slurmstepd samples RSS and kills the step; sacct says FAILED/CANCELLED).

    ORCH_SANDBOX_MEMORY=cgroup|jobacct overrides the probe.
    """
    forced = os.environ.get("ORCH_SANDBOX_MEMORY", "").strip().lower()
    if forced in ("cgroup", "jobacct"):
        return forced
    return "cgroup" if _cgroup_v1_memory_usable() else "jobacct"


def _plugins_conf(mode: str) -> str:
    if mode == "cgroup":
        return "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
    return "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none"


def _acct_gather_conf(mode: str) -> str:
    if mode == "cgroup":
        return (
            "# Memory enforcement by the kernel: task/cgroup puts each step in a memory cgroup\n"
            "# limited to --mem; the OOM killer stops it and sacct says OUT_OF_MEMORY.\n"
            "# (jobacct_gather/cgroup reports MaxRSS 0 here; /proc sampling gives real numbers.)\n"
            "JobAcctGatherType=jobacct_gather/linux\n"
            "JobAcctGatherFrequency=task=1"
        )
    return (
        "# Memory enforcement without cgroups: slurmstepd samples RSS every second and kills\n"
        "# a step over --mem (sacct then says FAILED 0:9, the batch step CANCELLED).\n"
        "JobAcctGatherType=jobacct_gather/linux\n"
        "JobAcctGatherFrequency=task=1\n"
        "JobAcctGatherParams=OverMemoryKill"
    )


def _cgroup_conf(mode: str) -> str:
    if mode != "cgroup":
        return f"{CONF_MARK}\n# cgroups are not used on this machine (see slurm.conf).\n"
    return f"""{CONF_MARK}
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
AllowedRAMSpace=100
ConstrainSwapSpace=yes
AllowedSwapSpace=0
"""


def _slurm_conf(mode: str | None = None, layout: TwinLayout | None = None) -> str:
    mode = mode or _memory_mode()
    layout = layout or plain_layout()
    host = _hostname()
    if layout.twin is None:
        cpus = _cpus_per_node()
        mem = _node_mem_mb()
        parts = []
        for name, (mx, dflt, is_default) in PARTITIONS.items():
            parts.append(
                f"PartitionName={name} Nodes={NODE_SPEC} Default={'YES' if is_default else 'NO'} "
                f"MaxTime={mx} DefaultTime={dflt} State=UP OverSubscribe=NO"
            )
        defmem = mem // cpus
        tres = "AccountingStorageTRES=gres/gpu"
        hardware = f"""# Fake GPUs (see gres.conf).
GresTypes=gpu
NodeName={NODE_SPEC} NodeHostname={host} NodeAddr=127.0.0.1 Port={SLURMD_BASE_PORT}-{SLURMD_BASE_PORT + len(NODES) - 1} CPUs={cpus} RealMemory={mem} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN
{chr(10).join(parts)}"""
    else:
        defmem = min(g.memory_mb // g.cpus for g in layout.groups)
        gres_names = sorted({n for g in layout.groups for n in g.gres} | {"gpu"})
        tres = (f"AccountingStorageTRES={','.join('gres/' + n for n in gres_names)}\n"
                f"# A twin refuses what the site would: unknown accounts and QoS, jobs over limits.\n"
                f"AccountingStorageEnforce={ENFORCE}")
        lines = [f"# Twin of site {layout.twin} ({', '.join(layout.targets)}); node sizes are the profile's,",
                 "# claimed through SlurmdParameters=config_overrides, not this host's. Fake devices: gres.conf."]
        if layout.ipus_max:
            lines.append(f"# sbatch/srun --ipus: a SPANK stand-in for Graphcore's Slurm (see {PLUGSTACK_CONF.name}).")
            lines.append(f"PlugStackConfig={PLUGSTACK_CONF}")
        lines.append(f"GresTypes={','.join(gres_names)}")
        for g in layout.groups:
            port = f"{SLURMD_BASE_PORT + g.first - 1}" + (
                f"-{SLURMD_BASE_PORT + g.first + g.count - 2}" if g.count > 1 else "")
            gres = ",".join(f"{n}:{c}" for n, c in g.gres.items())
            lines.append(f"# {g.label}: {g.describe}")
            lines.append(
                f"NodeName={g.spec} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={g.cpus} "
                f"RealMemory={g.memory_mb}" + (f" Gres={gres}" if gres else "")
                + (f" Feature={','.join(g.features)}" if g.features else "") + " State=UNKNOWN")
        for part in layout.partitions:
            nodes = ",".join(layout.group(label).spec for label in part.groups)
            part_mem = min(layout.group(label).memory_mb // layout.group(label).cpus for label in part.groups)
            line = (f"PartitionName={part.name} Nodes={nodes} Default={'YES' if part.default else 'NO'} "
                    f"MaxTime={part.max_time} MinNodes={part.min_nodes} DefMemPerCPU={part_mem}"
                    + (f" MaxNodes={part.max_nodes}" if part.max_nodes else "")
                    + (f" QOS={part.qos}" if part.qos else "")
                    + (f" AllowQos={','.join(part.allow_qos)}" if part.allow_qos else "")
                    + " State=UP OverSubscribe=NO")
            if part.implicit:
                lines.append(f"# {part.name}: the site's default partition (the profile's queue "
                             f"{part.site_queue!r} is implicit: scripts name no partition)")
            lines.append(line)
        hardware = "\n".join(lines)
    return f"""{CONF_MARK}
ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
{_plugins_conf(mode)}
SwitchType=switch/none
ReturnToService=2
StateSaveLocation={STATE_DIR}/ctld
SlurmdSpoolDir={STATE_DIR}/d/%n
SlurmctldPidFile={CTLD_PID}
SlurmdPidFile={RUN_DIR}/slurmd-%n.pid
SlurmctldLogFile={CTLD_LOG}
SlurmdLogFile={LOG_DIR}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
SlurmdParameters=config_overrides
# Scheduling: small timers so tests are fast.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_min_interval=100000,batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={defmem}
EnforcePartLimits=ALL
MaxArraySize={MAX_ARRAY_SIZE}
MaxJobCount={MAX_JOB_COUNT}
MinJobAge=10
KillWait=2
OverTimeLimit=0
InactiveLimit=0
Waittime=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
UnkillableStepTimeout=30
# Accounting (sacct) through slurmdbd.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={DBD_PORT}
{tres}
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
{_acct_gather_conf(mode)}
{hardware}
"""


# gres whose plugin counts device files (a gres line without File leaves the node INVAL).
_FILE_GRES = ("gpu", "mps", "nic")


def _fake_device_files(count: int) -> list[str]:
    return [str(FAKEDEV_DIR / f"gpu{i}") for i in range(count)]


def _gres_conf(layout: TwinLayout | None = None) -> str:
    lines = [CONF_MARK, "AutoDetect=off"]
    if layout is None or layout.twin is None:
        for f in FAKE_GPU_FILES[:GPUS_PER_NODE]:
            lines.append(f"NodeName={NODE_SPEC} Name=gpu File={f}")
        return "\n".join(lines) + "\n"
    for g in layout.groups:
        for name, count in g.gres.items():
            if name in _FILE_GRES:
                files = f"{FAKEDEV_DIR}/gpu[0-{count - 1}]" if count > 1 else f"{FAKEDEV_DIR}/gpu0"
                lines.append(f"NodeName={g.spec} Name={name} File={files}")
            else:
                lines.append(f"NodeName={g.spec} Name={name} Count={count}")
    return "\n".join(lines) + "\n"


def _ensure_fake_devices(layout: TwinLayout) -> None:
    """Distinct device files for the twin's gres (character devices like /dev/null where mknod is
    allowed; slurmd also counts plain files, logging that they are no devices)."""
    count = max((c for g in layout.groups for n, c in g.gres.items() if n in _FILE_GRES), default=0)
    if not count:
        return
    FAKEDEV_DIR.mkdir(parents=True, exist_ok=True)
    for path in map(Path, _fake_device_files(count)):
        if path.exists():
            continue
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            path.touch()


def _plugstack_conf(layout: TwinLayout) -> str | None:
    if not layout.ipus_max:
        return None
    return (f"{CONF_MARK}\n# Graphcore's --ipus (twin stand-in; see orchestrator/sites/sandbox.py SPANK_IPUS_SOURCE)\n"
            f"required {SPANK_DIR / 'orch_twin_ipus.so'} max={layout.ipus_max}\n")


def _dbd_conf() -> str:
    return f"""{CONF_MARK}
AuthType=auth/munge
DbdHost=localhost
DbdPort={DBD_PORT}
SlurmUser=root
DebugLevel=info
LogFile={DBD_LOG}
PidFile={DBD_PID}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser={DB_USER}
StoragePass={DB_PASS}
StorageLoc={DB_NAME}
"""


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    try:
        if path.read_text() == text:
            if (path.stat().st_mode & 0o777) != mode:
                path.chmod(mode)
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".orch-tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


# --------------------------------------------------------------------------------------
# Graphcore's --ipus on a stock Slurm: a SPANK plugin
# --------------------------------------------------------------------------------------

# ``sbatch --ipus=4`` on this Slurm (22.05, Debian) fails: "sbatch: unrecognized option
# '--ipus=4'". The option comes from Graphcore's modified Slurm (its V-IPU select plugin and
# client patches); a stock Slurm has no IPU resource. The twin adds the option to sbatch, srun
# and salloc through this SPANK plugin, which checks only what the site checks of the value
# (IPU counts are powers of two, at most the Pod's); it allocates nothing. Declarations follow
# slurm/spank.h; options must be registered with spank_option_register in allocator context.
SPANK_IPUS_SOURCE = r"""
/* Written by orch.sandbox: --ipus for a twin of a Graphcore (V-IPU) Slurm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*spank_opt_cb_f)(int val, const char *optarg, int remote);
struct spank_option { char *name; char *arginfo; char *usage; int has_arg; int val; spank_opt_cb_f cb; };
extern int spank_option_register(void *spank, struct spank_option *opt);

const char plugin_name[] = "orch_twin_ipus";
const char plugin_type[] = "spank";
const unsigned int plugin_version = ORCH_SLURM_VERSION;
const unsigned int spank_plugin_version = 1;

static long max_ipus = 64;

static int ipus_cb(int val, const char *optarg, int remote)
{
    char *end = NULL;
    long n = optarg ? strtol(optarg, &end, 10) : -1;
    if (!optarg || *optarg == '\0' || *end != '\0' || n < 1 || (n & (n - 1)) || n > max_ipus) {
        fprintf(stderr, "error: --ipus=%s: IPU counts are powers of two from 1 to %ld\n",
                optarg ? optarg : "", max_ipus);
        return -1;
    }
    return 0;
}

static struct spank_option ipus_option = {
    "ipus", "N", "IPUs for the job (orch twin stand-in for Graphcore's Slurm: checks the count only)",
    1, 0, ipus_cb
};

int slurm_spank_init(void *sp, int ac, char **av)
{
    for (int i = 0; i < ac; i++)
        if (strncmp(av[i], "max=", 4) == 0)
            max_ipus = strtol(av[i] + 4, NULL, 10);
    return spank_option_register(sp, &ipus_option) == 0 ? 0 : -1;
}
"""


def _slurm_version_number() -> int:
    cp = _run(["sbatch", "--version"], timeout=10, env=_clean_env())
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", cp.stdout)
    if not match:
        raise SandboxError(f"cannot read the Slurm version from `sbatch --version`: {cp.stdout}{cp.stderr}")
    major, minor, micro = map(int, match.groups())
    return (major << 16) | (minor << 8) | micro


def _ensure_spank_ipus() -> Path | None:
    """Build the --ipus SPANK plugin (once per Slurm version) and return its path; None when
    there is no C compiler (the twin then refuses --ipus like any stock Slurm, and
    ``orch sites check`` reports the option as not verifiable here)."""
    version = _slurm_version_number()
    source = SPANK_IPUS_SOURCE
    digest = hashlib.sha256(f"{version}\n{source}".encode()).hexdigest()[:16]
    so = SPANK_DIR / "orch_twin_ipus.so"
    stamp = SPANK_DIR / "orch_twin_ipus.stamp"
    try:
        if so.exists() and stamp.read_text().strip() == digest:
            return so
    except OSError:
        pass
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return None
    SPANK_DIR.mkdir(parents=True, exist_ok=True)
    src = SPANK_DIR / "orch_twin_ipus.c"
    src.write_text(source)
    tmp = SPANK_DIR / "orch_twin_ipus.so.tmp"
    cp = _run([compiler, "-shared", "-fPIC", "-O2", f"-DORCH_SLURM_VERSION={version}", "-o", str(tmp), str(src)],
              timeout=120)
    if cp.returncode != 0:
        raise SandboxError(f"building the --ipus SPANK plugin failed:\n{cp.stdout}{cp.stderr}")
    os.replace(tmp, so)
    stamp.write_text(digest + "\n")
    return so


# --------------------------------------------------------------------------------------
# Packages
# --------------------------------------------------------------------------------------

_apt_updated = False


def _apt_install(packages: list[str]) -> None:
    global _apt_updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not shutil.which("apt-get"):
        raise SandboxError(f"missing packages {packages} and no apt-get to install them (Debian/Ubuntu only)")
    if not _apt_updated:
        cp = _run(["apt-get", "update", "-q"], timeout=600, env=env)
        if cp.returncode != 0:
            raise SandboxError(f"apt-get update failed:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")
        _apt_updated = True
    cp = _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], timeout=1200, env=env)
    if cp.returncode != 0:
        raise SandboxError(f"apt-get install {' '.join(packages)} failed:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")


def _ensure_packages() -> None:
    needed = {
        "slurmctld": "slurmctld",
        "slurmd": "slurmd",
        "sbatch": "slurm-client",
        "slurmdbd": "slurmdbd",
        "munged": "munge",
    }
    missing = sorted({pkg for exe, pkg in needed.items() if not shutil.which(exe, path="/usr/sbin:/usr/bin")})
    if not Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so").exists() and not any(
        Path("/usr/lib").glob("*/slurm-wlm/accounting_storage_mysql.so")
    ):
        missing.append("slurm-wlm-mysql-plugin")
    if missing:
        _apt_install(sorted(set(missing) | {"slurm-wlm", "slurmdbd", "munge"}))


# --------------------------------------------------------------------------------------
# munge
# --------------------------------------------------------------------------------------


def _munge_ok() -> bool:
    cp = _run(["munge", "-n"], timeout=10)
    if cp.returncode != 0:
        return False
    return _run(["unmunge"], timeout=10, input=cp.stdout).returncode == 0


def _ensure_munge() -> None:
    if _pid_alive(MUNGE_PID, "munged") and _munge_ok():
        return
    for d, mode in ((Path("/etc/munge"), 0o700), (Path("/var/lib/munge"), 0o700),
                    (Path("/var/log/munge"), 0o700), (Path("/run/munge"), 0o755)):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
        d.chmod(mode)
    if not MUNGE_KEY.exists():
        if shutil.which("mungekey", path="/usr/sbin:/usr/bin"):
            _run(["mungekey", "--create", f"--keyfile={MUNGE_KEY}"], check=True)
        else:
            MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    # A stale socket or pid file from a killed munged stops a new one.
    if not _pid_alive(MUNGE_PID, "munged"):
        for stale in (MUNGE_PID, Path("/run/munge/munge.socket.2"), Path("/run/munge/munge.socket.2.lock")):
            stale.unlink(missing_ok=True)
        cp = _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], timeout=30)
        if cp.returncode != 0:
            raise SandboxError(f"munged did not start: {cp.stderr.strip()}\n{_tail(MUNGE_LOG)}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _munge_ok():
            return
        time.sleep(0.2)
    raise SandboxError(f"munged runs but `munge -n | unmunge` fails\n{_tail(MUNGE_LOG)}")


# --------------------------------------------------------------------------------------
# MariaDB
# --------------------------------------------------------------------------------------


def _mysql(sql: str, timeout: float = 15) -> subprocess.CompletedProcess:
    """Run SQL as the database's root: the unix socket first, then TCP 127.0.0.1."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    if not client:
        return subprocess.CompletedProcess([], 127, "", "no mariadb/mysql client")
    cp = _run([client, "-uroot", "-N", "-B", "-e", sql], timeout=timeout)
    if cp.returncode == 0:
        return cp
    cp2 = _run([client, "-uroot", "-h127.0.0.1", "-P3306", "-N", "-B", "-e", sql], timeout=timeout)
    if cp2.returncode == 0:
        return cp2
    return subprocess.CompletedProcess(cp.args, cp.returncode, cp.stdout, cp.stderr + cp2.stderr)


def _mariadb_ok() -> bool:
    return _mysql("SELECT 1", timeout=5).returncode == 0


def _ensure_mariadb() -> None:
    if _mariadb_ok():
        return
    if not (shutil.which("mariadbd", path="/usr/sbin:/usr/bin") or shutil.which("mysqld", path="/usr/sbin:/usr/bin")):
        _apt_install(list(DB_PACKAGES))
        if _mariadb_ok():  # the package's postinst may have started it
            return
    run_dir = Path("/run/mysqld")
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "mysql", "mysql")
    datadir = Path("/var/lib/mysql")
    if not (datadir / "mysql").is_dir():
        installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if installer:
            _run([installer, "--user=mysql", f"--datadir={datadir}"], timeout=300, check=True)
    Path("/var/log/mysql").mkdir(parents=True, exist_ok=True)
    shutil.chown("/var/log/mysql", "mysql", "adm" if _group_exists("adm") else "mysql")
    safe = shutil.which("mysqld_safe", path="/usr/bin:/usr/sbin")
    if safe:
        cmd = [safe]
    else:
        cmd = [shutil.which("mariadbd", path="/usr/sbin:/usr/bin") or "/usr/sbin/mariadbd", "--user=mysql"]
    subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _mariadb_ok():
            return
        time.sleep(0.5)
    raise SandboxError("MariaDB did not answer within 60 s after starting it\n" + _tail(Path("/var/log/mysql/error.log")))


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _ensure_database() -> None:
    sql = (
        f"CREATE DATABASE IF NOT EXISTS {DB_NAME};"
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASS}';"
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}';"
        f"ALTER USER '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASS}';"
        f"ALTER USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}';"
        f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost';"
        f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';"
        "FLUSH PRIVILEGES;"
    )
    cp = _mysql(sql)
    if cp.returncode != 0:
        raise SandboxError(f"could not create the accounting database/user in MariaDB: {cp.stderr.strip()}")


def _database_ready() -> bool:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if not client:
        return False
    cp = _run([client, f"-u{DB_USER}", f"-p{DB_PASS}", "-h127.0.0.1", "-P3306", "-N", "-B", "-e",
               f"USE {DB_NAME}; SELECT 1"], timeout=5)
    return cp.returncode == 0


# --------------------------------------------------------------------------------------
# Slurm daemons
# --------------------------------------------------------------------------------------


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
        f"nodes did not become idle within {timeout:.0f} s: {detail or 'sinfo shows none'}\n{_tail(CTLD_LOG, 15)}\n{logs}"
    )


# --------------------------------------------------------------------------------------
# Accounts and QoS of a twin (slurmdbd)
# --------------------------------------------------------------------------------------


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
            tres = pq.max_tres_per_job or ",".join(f"{item.split('=')[0]}=-1" for item in current.split(",") if "=" in item)
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


def _active_jobs() -> int:
    cp = _run(["squeue", "-h", "-o", "%i"], timeout=15, env=_clean_env())
    return len(cp.stdout.split()) if cp.returncode == 0 else 0


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


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


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _config_files(mode: str, layout: TwinLayout) -> dict[Path, str | None]:
    """Every file up() writes for this layout (None: the file must not exist)."""
    return {
        SLURM_CONF: _slurm_conf(mode, layout),
        GRES_CONF: _gres_conf(layout),
        CGROUP_CONF: _cgroup_conf(mode),
        PLUGSTACK_CONF: _plugstack_conf(layout),
    }


def _configs_current(mode: str, layout: TwinLayout | None = None) -> bool:
    layout = layout or plain_layout()
    try:
        for path, text in _config_files(mode, layout).items():
            if text is None:
                if path.exists():
                    return False
            elif path.read_text() != text:
                return False
        return DBD_CONF.read_text() == _dbd_conf() and active_layout().to_json() == layout.to_json()
    except OSError:
        return False


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
    mode = _memory_mode()
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
            raise SandboxError("sacct does not answer although slurmdbd runs\n" + _tail(DBD_LOG) + "\n" + _tail(CTLD_LOG))
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
