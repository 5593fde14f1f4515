"""What the cluster is configured as: the plain sandbox, or the twin of a site profile.

A :class:`TwinLayout` is computed from the profile (:func:`twin_layout`) and recorded next to
the configuration (``layout.json``), so that ``status()`` and a later ``up()`` know which
twin /etc/slurm holds (:func:`active_layout`). It holds values only: the text Slurm reads is
laid out by the templates (:mod:`orchestrator.sites.sandbox.configs`).

Host facts (CPUs, memory, a C compiler) are read through :mod:`.facts` so that a test can fix
them for the whole package.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from orchestrator.errors import UserError
from orchestrator.sites.sandbox import facts
from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import (
    CONF_MARK,
    GPUS_PER_NODE,
    LAYOUT_FILE,
    NODES,
    PARTITION_QOS_PREFIX,
    PARTITIONS,
    SLURM_CONF,
    STAND_IN_ACCOUNT,
    STAND_IN_QOS,
    TWIN_DEFAULT_MEM_PER_CPU_MB,
    TWIN_MAX_NODES,
    TWIN_MAX_TOTAL_NODES,
)


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
    groups = [NodeGroup("sandbox", 1, len(NODES), facts._cpus_per_node(), facts._node_mem_mb(), {"gpu": GPUS_PER_NODE})]
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
            cpus = max(full_cpus, dev.per_node, facts._cpus_per_node())
            notes.append(f"{target}: the profile gives no node.cpus; the twin's nodes claim {cpus}")
        if node.memory_gb:
            memory = int(node.memory_gb * 1024)
        else:
            memory = max(facts._node_mem_mb(), _mem_mb(res.mem), _mem_mb(res.mem_per_device) * cards,
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
    if ipus_max and not facts._c_compiler():
        notes.append("no C compiler to build the --ipus SPANK stand-in: the twin refuses --ipus like any "
                     "stock Slurm, and `orch sites check` reports it as not verifiable here")
        ipus_max = None
    default = next((p for p in partitions if p.implicit), partitions[0])
    default.default = True
    return TwinLayout(twin=name, groups=groups, partitions=partitions, accounts=accounts, qos=qos,
                      partition_qos=partition_qos, ipus_max=ipus_max, targets=[t for t, _ in slurm],
                      no_twin=no_twin, notes=notes)
