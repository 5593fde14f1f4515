"""Site profiles: one YAML file per site, validated, found on a search path.

Sites are data: scheduler, queues and their limits, node layout, device peaks,
launcher, environment. A site with several systems (the ALCF AI Testbed) lists
per-system overrides under ``systems``; ``site:system`` selects one. A system's
``device``, ``node``, ``resources`` and ``launcher`` replace the site's whole
sections; its other mappings (``env``, ``account``, ...) are merged key by key
and its lists replace the site's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from orchestrator import paths
from orchestrator.errors import SourceError, UserError
from orchestrator.sites.launcher_options import LAUNCHER_OPTIONS
from orchestrator.sites.options import option_problem
from orchestrator.sites.schedulers import SCHEDULERS
from orchestrator.timefmt import format_hms, parse_walltime
from orchestrator.yamlsource import format_loc, load_yaml
from workloads.registry import PRECISIONS

DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "rdu", "ipu", "wse", "lpu")
# Peak keys that are not run precisions: fp64 (vector) and fp64 on matrix units.
PEAK_ONLY_KEYS = ("fp64", "fp64_matrix")
# How a Slurm site is asked for accelerators.
GPU_REQUESTS = ("none", "gres", "gpus-per-node", "gpus", "ipus")
# How each rank is pinned to a device: "reversed" numbers devices the other way round from
# the cores (Polaris: CUDA_VISIBLE_DEVICES = 3 - local_rank % 4); "local_rank" in order.
GPU_AFFINITY = ("none", "reversed", "local_rank")


class Queue(BaseModel):
    """A partition (Slurm) or queue (PBS) and the limits orch picks it by.

    Several entries may share a ``name`` when the scheduler routes one queue to
    tiers with their own limits (Polaris ``prod``: small / medium / large); each
    entry then carries a ``tier`` label and the run is submitted with ``name``.
    """

    model_config = ConfigDict(extra="forbid")
    name: str
    # Label of a routed tier of ``name`` (shown as "prod (small)"); the queue submitted is ``name``.
    tier: str | None = None
    min_nodes: int = Field(1, ge=1)
    max_nodes: int = Field(ge=1)
    max_walltime: str | int
    min_devices: int = Field(1, ge=1)
    max_devices: int | None = Field(None, ge=1)
    max_jobs_per_user: int | None = None
    max_queued_per_user: int | None = None
    max_running_per_project: int | None = None
    max_queued_per_project: int | None = None
    # False: never chosen on its own (only when a run asks for it by name), e.g. preemptable queues.
    auto: bool = True
    # Node counts for which orch prefers this queue when choosing on its own (default: its limits).
    # Outside this range the queue is still a fallback when nothing preferred fits.
    prefer_nodes: tuple[int, int] | None = None
    # The scheduler's default partition/queue, whose name the site does not publish: the script
    # does not name it (``name`` is only orch's label for it).
    implicit: bool = False
    # A fixed QoS the partition requires (a site fact, e.g. Stanage ``gpu``); a user's QoS comes from the env.
    qos: str | None = None
    # Scheduler-specific extra directives for this queue (validated when rendered).
    directives: list[str] = Field(default_factory=list)
    note: str = ""

    @field_validator("max_walltime")
    @classmethod
    def _walltime(cls, value: str | int) -> str | int:
        parse_walltime(value)
        return value

    @field_validator("prefer_nodes")
    @classmethod
    def _prefer(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError("prefer_nodes must be [low, high] with 1 <= low <= high")
        return value

    @property
    def max_walltime_s(self) -> int:
        return parse_walltime(self.max_walltime)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.tier})" if self.tier else self.name

    def limits_text(self) -> str:
        nodes = f"{self.min_nodes}-{self.max_nodes} nodes" if self.min_nodes != self.max_nodes else (
            f"{self.max_nodes} node" + ("s" if self.max_nodes > 1 else ""))
        devices = ""
        if self.max_devices is not None or self.min_devices > 1:
            devices = f", {self.min_devices}-{self.max_devices or '...'} devices"
        return f"{self.label}: {nodes}{devices}, <= {format_hms(self.max_walltime_s)}"

    def prefers(self, nodes: int) -> bool:
        low, high = self.prefer_nodes or (self.min_nodes, self.max_nodes)
        return low <= nodes <= high


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal[DEVICE_TYPES]  # type: ignore[valid-type]
    model: str
    per_node: int = Field(ge=1)
    memory_gb: float | None = Field(None, gt=0)
    # What a process holds on the device besides its tensors (context, allocator, collective
    # buffers), GB: added to the predicted tensor peak by the plan's memory check. An estimate.
    fixed_memory_gb: float | None = Field(None, ge=0)
    bandwidth_gbs: float | None = Field(None, gt=0)
    peak_tflops: dict[str, float] = Field(default_factory=dict)
    precisions: list[Literal[PRECISIONS]] = Field(default_factory=lambda: ["fp32"])  # type: ignore[valid-type]
    # "power_of_two": device counts must be 1, 2, 4, ... (Graphcore IPUs).
    counts: Literal["any", "power_of_two"] = "any"
    # Logical devices per physical card: 2 for an Intel Max 1550 in FLAT mode (two stacks) or an
    # MI250 (two dies). Schedulers count cards (``--gres=gpu:N``), orch counts logical devices.
    per_card: int = Field(1, ge=1)
    # Frameworks the device runs (informational: pytorch, ipex, poptorch, sambaflow, ...).
    frameworks: list[str] = Field(default_factory=lambda: ["pytorch"])
    # Whether the node's devices are accelerators a run may hold part of (a partial-node run then
    # asks for the whole node). Default: any type but cpu; a rehearsal on CPU of an accelerator
    # site keeps true, so its scripts carry the site's own requests.
    accelerator: bool | None = None

    @property
    def is_accelerator(self) -> bool:
        return self.type != "cpu" if self.accelerator is None else self.accelerator

    @field_validator("peak_tflops")
    @classmethod
    def _peaks(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key not in PRECISIONS + PEAK_ONLY_KEYS:
                raise ValueError(f"unknown precision {key!r} in peak_tflops")
        return value


class Network(BaseModel):
    """The two-tier network the time model (orchestrator/predict/perfmodel/) sees: devices in one fast
    domain (NVLink, xGMI, Xe Link; a node's shared memory) talk at ``fast_gbs`` each way, devices
    in different domains at ``inter_node_gbs`` per device (the node's NIC bandwidth divided by
    its devices). GB/s per device, one direction; ``latency_us`` is a message's start-up cost
    (alpha of the alpha-beta model). ``source`` says where the figures come from ("estimate"
    where no reference gives them)."""

    model_config = ConfigDict(extra="forbid")
    fast_domain: int = Field(ge=1)  # devices in one fast domain (usually a node's)
    fast_gbs: float = Field(gt=0)
    inter_node_gbs: float = Field(gt=0)
    latency_us: float = Field(5.0, ge=0)
    source: str = Field(min_length=1)


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: int | None = Field(None, ge=1)
    memory_gb: float | None = Field(None, gt=0)


class Launcher(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # A registered launcher (orchestrator/sites/launchers.py, the vendor runners).
    name: str = "python"
    # Extra launcher arguments, each quoted when rendered.
    args: list[str] = Field(default_factory=list)
    # Per-rank device pinning done by a small wrapper the template writes (see GPU_AFFINITY).
    gpu_affinity: Literal[GPU_AFFINITY] = "none"  # type: ignore[valid-type]
    # Launcher-specific settings (e.g. torchrun ``via: srun``; a vendor runner's ``examples``), checked
    # against the launcher's model in orchestrator/sites/launcher_options.py when the profile loads
    # (SiteProfile._options); kept as written.
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in LAUNCHER_OPTIONS:
            raise ValueError(f"unknown launcher {value!r} (valid: {', '.join(LAUNCHER_OPTIONS.names())})")
        return value


class Account(BaseModel):
    """Where the project/account and QoS come from: the user's environment, never the profile."""

    model_config = ConfigDict(extra="forbid")
    env: str = "ORCH_ACCOUNT"
    required: bool = False
    # Read when ``env`` is unset (e.g. ORCH_ACCOUNT, one variable for users of a single site).
    fallback_env: str | None = None
    # Appended when the value does not end with it (Dawn accounts are ``<project>-dawn-gpu``).
    suffix: str = ""
    # None: the site takes no QoS from the user (a partition's fixed QoS is the queue's ``qos``).
    qos_env: str | None = "ORCH_QOS"
    qos_fallback_env: str | None = None
    qos_required: bool = False

    def account(self, environ: Any) -> str | None:
        value = environ.get(self.env) or (environ.get(self.fallback_env) if self.fallback_env else None)
        if value and self.suffix and not value.endswith(self.suffix):
            value += self.suffix
        return value or None

    def qos(self, environ: Any) -> str | None:
        value = (environ.get(self.qos_env) if self.qos_env else None) or (
            environ.get(self.qos_fallback_env) if self.qos_fallback_env else None)
        return value or None


class Resources(BaseModel):
    """Scheduler resource requests beyond nodes and tasks, each a fact of the site.

    Slurm: ``gpu_request`` says how accelerators are asked for (``--gres=<gres_name>:<cards>``,
    ``--gpus-per-node=<cards>``, ``--gpus=<total>``, Graphcore ``--ipus=<total>``, or not at all);
    ``cpus_per_device`` becomes ``--cpus-per-gpu`` (with ``gpus-per-node``/``gpus``) or
    ``--cpus-per-task`` (per rank); ``mem`` is ``--mem`` per node.
    PBS: ``select`` is the chunk after the node count (``-l select=N:<select>``), ``place`` and
    ``filesystems`` are ``-l place=`` and ``-l filesystems=``.
    """

    model_config = ConfigDict(extra="forbid")
    gpu_request: Literal[GPU_REQUESTS] = "none"  # type: ignore[valid-type]
    gres_name: str = "gpu"
    cpus_per_device: int | None = Field(None, ge=1)
    mem: str | None = None
    mem_per_device: str | None = None
    exclusive: bool = False
    constraint: str | None = None
    select: str | None = None
    place: str | None = None
    filesystems: str | None = None


PRICE_BASES = ("centre-rate", "on-demand-same-part", "on-demand-comparable-part", "local-estimate")


class Price(BaseModel):
    """What an hour of the site's devices costs, with where the figure comes from.

    Exactly one of ``per_device_hour`` and ``per_node_hour``; the other follows from the
    devices of a node. ``basis`` says what kind of figure it is: the centre's published rate,
    the public on-demand price of the same part, of the nearest comparable part (when the part
    is not sold by the hour anywhere public), or an estimate for this machine.
    """

    model_config = ConfigDict(extra="forbid")
    per_device_hour: float | None = Field(None, gt=0)
    per_node_hour: float | None = Field(None, gt=0)
    currency: str = Field("USD", pattern=r"^[A-Z]{3}$")
    basis: Literal[PRICE_BASES]  # type: ignore[valid-type]
    source: str = Field(min_length=1)
    date: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}(-[0-9]{2})?$")  # when the price was read

    @model_validator(mode="after")
    def _one_rate(self) -> "Price":
        if (self.per_device_hour is None) == (self.per_node_hour is None):
            raise ValueError("give exactly one of per_device_hour and per_node_hour")
        return self

    def device_hour(self, devices_per_node: int) -> float:
        if self.per_device_hour is not None:
            return self.per_device_hour
        return float(self.per_node_hour or 0) / max(1, devices_per_node)

    def node_hour(self, devices_per_node: int) -> float:
        if self.per_node_hour is not None:
            return self.per_node_hour
        return float(self.per_device_hour or 0) * max(1, devices_per_node)


# The pydantic error type of SiteProfile._options (load_site locates it from its context).
OPTION_ERROR = "site_option"


class SiteProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    scheduler: str  # one of SCHEDULERS (orchestrator/sites/schedulers.py)
    template: str | None = None  # default: <scheduler>.sh.j2
    python: str | None = None  # interpreter on the nodes; None: the one running orch
    max_nodes: int = Field(1, ge=1)
    node: Node = Field(default_factory=Node)
    device: Device
    queues: list[Queue] = Field(min_length=1)
    launcher: Launcher = Field(default_factory=Launcher)
    account: Account = Field(default_factory=Account)
    env: dict[str, str] = Field(default_factory=dict)
    setup: list[str] = Field(default_factory=list)
    directives: list[str] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    # Options for the scheduler's executor, checked against its model in orchestrator/sites/schedulers.py
    # (SiteProfile._options); kept as written, read as that model by the executor.
    executor: dict[str, Any] = Field(default_factory=dict)
    price: Price | None = None
    network: Network | None = None  # for the time model; None: estimated from the device type
    systems: dict[str, dict[str, Any]] = Field(default_factory=dict)
    system: str | None = None  # set when a system's overrides were applied

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {value!r} (valid: {', '.join(SCHEDULERS.names())})")
        return value

    @model_validator(mode="after")
    def _options(self) -> "SiteProfile":
        """The executor's and the launcher's options against their models (one error, located)."""
        for base, model, what, data in (
                (("executor",), SCHEDULERS.get(self.scheduler), f"scheduler {self.scheduler}", self.executor),
                (("launcher", "options"), LAUNCHER_OPTIONS.get(self.launcher.name), f"launcher {self.launcher.name}",
                 self.launcher.options)):
            problem = option_problem(model, data, what)
            if problem is not None:
                line_at, field, message = problem
                # load_site reads where the problem is from the context (a model validator's own
                # errors are located at the model); str() is the message alone.
                raise PydanticCustomError(OPTION_ERROR, "{message}", {
                    "message": message, "line_at": base + line_at, "field": base + field})
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "SiteProfile":
        for queue in self.queues:
            if queue.min_nodes > queue.max_nodes:
                raise ValueError(f"queue {queue.label}: min_nodes > max_nodes")
            if queue.max_nodes > self.max_nodes:
                raise ValueError(f"queue {queue.label}: max_nodes {queue.max_nodes} > the site's max_nodes "
                                 f"{self.max_nodes}")
        labels = [q.label for q in self.queues]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"queues listed twice: {', '.join(duplicates)} (give each routed tier a `tier`)")
        if self.device.counts == "power_of_two" and self.device.per_node & (self.device.per_node - 1):
            raise ValueError("device.per_node must be a power of two when device.counts is power_of_two")
        res = self.resources
        slurm_only = res.gpu_request != "none" or res.cpus_per_device or res.mem or res.mem_per_device \
            or res.constraint or res.exclusive
        pbs_only = res.select or res.place or res.filesystems
        if self.scheduler == "pbs" and slurm_only:
            raise ValueError("resources: gpu_request, cpus_per_device, mem, mem_per_device, constraint and "
                             "exclusive are Slurm requests; a PBS site uses select/place/filesystems")
        if self.scheduler == "slurm" and pbs_only:
            raise ValueError("resources: select, place and filesystems are PBS requests")
        return self

    def queues_named(self, name: str) -> list[Queue]:
        return [q for q in self.queues if q.name == name]

    @property
    def template_name(self) -> str:
        return self.template or f"{self.scheduler}.sh.j2"

    def peak(self, precision: str) -> float | None:
        return self.device.peak_tflops.get(precision)


# A system is another machine: these sections of its overrides replace the site's wholesale
# (nothing of one machine's device or launcher leaks into another's); other mappings merge.
REPLACED_BY_SYSTEM = ("device", "node", "resources", "launcher", "price", "network")


def _merge(base: dict[str, Any], override: dict[str, Any], top: bool = False) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if top and key in REPLACED_BY_SYSTEM:
            out[key] = value
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def find_site_file(name: str, sites_dirs: list[Path] | None = None) -> Path:
    for directory in paths.sites_search_path(sites_dirs):
        candidate = directory / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    known = ", ".join(available_sites(sites_dirs)) or "none"
    raise UserError(f"unknown site {name!r} (known: {known}; "
                    f"add one as <dir>/{name}.yaml with --sites-dir or ORCH_SITES_PATH)")


def available_sites(sites_dirs: list[Path] | None = None) -> list[str]:
    names: set[str] = set()
    for directory in paths.sites_search_path(sites_dirs):
        if directory.is_dir():
            names.update(p.stem for p in directory.glob("*.yaml"))
    return sorted(names)


def load_site(target: str, sites_dirs: list[Path] | None = None) -> SiteProfile:
    """The profile for ``site`` or ``site:system``; errors name the YAML file and line."""
    name, _, system = target.partition(":")
    path = find_site_file(name, sites_dirs)
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping (a site profile)")
    data = doc.data
    if system:
        systems = data.get("systems") or {}
        if system not in systems:
            raise UserError(f"{path}: site {name!r} has no system {system!r} (known: {', '.join(systems) or 'none'})")
        data = _merge({k: v for k, v in data.items() if k != "systems"}, systems[system] or {}, top=True)
        data["system"] = system

    def located(loc: tuple[Any, ...]) -> tuple[Any, ...]:  # a system's value is in its overrides
        if system and loc and loc[0] in ((doc.data.get("systems") or {}).get(system) or {}):
            return ("systems", system) + loc
        return loc

    try:
        return SiteProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == OPTION_ERROR:  # an executor or launcher option: located by SiteProfile._options
            ctx = first["ctx"]
            raise SourceError(doc.path, doc.line_of(located(tuple(ctx["line_at"]))),
                              format_loc(located(tuple(ctx["field"]))) or None, ctx["message"]) from None
        loc = located(tuple(first["loc"]))
        message = ("unknown field" if first["type"] == "extra_forbidden"
                   else str(first["msg"]).removeprefix("Value error, "))
        raise doc.error(loc, message) from None
