"""Site profiles: one YAML file per site, validated, found on a search path.

Sites are data: scheduler, queues and their limits, node layout, device peaks,
launcher, environment. A site with several systems (the ALCF AI Testbed) lists
per-system overrides under ``systems``; ``site:system`` selects one. A system's
``device``, ``node``, ``resources``, ``launcher`` and ``python_env`` replace the
site's whole sections; its other mappings (``env``, ``account``, ...) are merged
key by key and its lists replace the site's.

``python_env`` says how a compute node gets the Python that runs the workloads
(the centre's documented modules, a virtual environment or a conda environment,
the user's where no page documents one); values of the form ``${NAME}`` in it
and in ``launcher.options`` are read from the environment when the plan is made,
like the account (see :func:`expand_references`).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from orchestrator import paths
from orchestrator.errors import SourceError, UserError, did_you_mean
from orchestrator.sites.launcher_options import LAUNCHER_OPTIONS
from orchestrator.sites.options import option_problem
from orchestrator.sites.schedulers import SCHEDULERS
from orchestrator.timefmt import format_hms, parse_walltime
from orchestrator.yamlsource import Loc, YamlDocument, data_loc, format_loc, load_yaml
from workloads.registry import PRECISIONS

DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "rdu", "ipu", "wse", "lpu")
# Peak keys that are not run precisions: fp64 (vector) and fp64 on matrix units.
PEAK_ONLY_KEYS = ("fp64", "fp64_matrix")
# How a Slurm site is asked for accelerators.
GPU_REQUESTS = ("none", "gres", "gpus-per-node", "gpus", "ipus")
# How each rank is pinned to a device: "reversed" numbers devices the other way round from
# the cores (Polaris: CUDA_VISIBLE_DEVICES = 3 - local_rank % 4); "local_rank" in order.
GPU_AFFINITY = ("none", "reversed", "local_rank")


# A name or a path is one line: a newline in one (YAML's "\n") went on as a live line of
# whatever orch generated from it (the sandbox twin's slurm.conf, a rehearsal profile's header).
_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line_value(value: str | None) -> str | None:
    if value is not None and (found := _NOT_ONE_LINE.search(value)):
        raise ValueError(f"expected one line of text, without control characters (found U+{ord(found.group()):04X})")
    return value


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

    @field_validator("name", "tier", "qos")
    @classmethod
    def _line(cls, value: str | None) -> str | None:
        return one_line_value(value)

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
    # The node's compute NICs and each one's GB/s (issue 25): cross-node collectives run with the
    # node's whole NIC bandwidth (hierarchical, as NCCL does), not a device's share of it. Optional:
    # without them the node's bandwidth is inter_node_gbs x the devices per node.
    nics: int | None = Field(None, ge=1)
    nic_gbs: float | None = Field(None, gt=0)
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _nics_together(self) -> "Network":
        if (self.nics is None) != (self.nic_gbs is None):
            raise ValueError("network: give nics and nic_gbs together (the node's NIC count and GB/s each)")
        return self


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


# How a compute node gets the Python that runs the workloads (``python_env.kind``): nothing more
# than ``setup`` gives (the interpreter running orch on this machine), the centre's modules alone,
# a virtual environment, or a conda environment.
PYTHON_ENV_KINDS = ("none", "modules", "venv", "conda")
# An environment variable's name, as ``export NAME=...`` and ``${NAME}`` take it.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# A plan-time reference: ``${NAME}`` in ``python_env`` and ``launcher.options`` is the value of the
# environment variable NAME when the plan is made (as the account is), so a path under the user's
# home or a clone the user made reaches the script as the absolute path it is there. Only this
# form is read; any other ``$`` is literal text (values reach the shell quoted either way).
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_references(value: Any, environ: Mapping[str, str]) -> tuple[Any, list[str]]:
    """``value`` with every ``${NAME}`` in its texts (inside lists and mappings too) replaced by
    ``environ[NAME]``, and the names that were unset or empty (left as written), in order."""
    missing: list[str] = []

    def one(match: re.Match[str]) -> str:
        found = environ.get(match.group(1))
        if found:
            return found
        if match.group(1) not in missing:
            missing.append(match.group(1))
        return match.group(0)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return REFERENCE.sub(one, item) if "${" in item else item
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            return {key: walk(x) for key, x in item.items()}
        return item

    return walk(value), missing


@dataclass(frozen=True)
class PythonActivation:
    """A ``python_env`` as one plan applies it (references read, the prefix chosen): what
    orchestrator/plan/render.py writes into the script before the program starts."""

    kind: str  # venv | conda | modules (a python_env of kind none is no activation at all)
    modules: tuple[tuple[str, ...], ...] = ()  # each module line, as its words
    conda: str = "conda"  # the conda executable whose shell hook the script evaluates
    prefix: str | None = None  # venv: its directory; conda: the environment's name or prefix (None: base)


class PythonEnv(BaseModel):
    """How a compute node gets the Python that runs the workloads, as the centre documents it.

    The script runs ``modules`` first (``module use``/``module load`` lines, an SDK's ``source
    .../enable``: each re-quoted word by word, as a setup line), then activates the environment:
    ``venv`` sources ``<prefix>/bin/activate``; ``conda`` evaluates conda's shell hook (a batch
    job's shell has not run the lines ``conda init`` writes into ~/.bashrc, so ``conda activate``
    alone fails there), then ``conda activate <prefix>`` (the base environment without one).

    The prefix is, the first that is given: ``prefix`` (written outright, in a copy of the profile
    or a sweep's ``site_overrides``), the environment variable ``prefix_env`` when the plan is made,
    ``default`` (where the centre's page puts it). With ``required`` and none of them, a run is
    skipped with the variable named. ``source`` cites the page the lines come from.
    """

    model_config = ConfigDict(extra="forbid")
    kind: Literal[PYTHON_ENV_KINDS] = "none"  # type: ignore[valid-type]
    modules: list[str] = Field(default_factory=list)
    conda: str = "conda"
    default: str | None = None
    prefix: str | None = None
    prefix_env: str | None = None
    required: bool = False
    # The torch version this environment provides, where the centre's page states it (a module
    # named PyTorch/2.1.2): `orch plan` skips a run whose strategy needs a newer one (issue 53).
    torch: str | None = Field(default=None, pattern=r"^[0-9]+(\.[0-9]+){0,2}([.+a-z0-9-]*)$")
    # What the prefix must hold, for the skip reason (default: by kind).
    description: str = ""
    source: str = ""

    @field_validator("modules")
    @classmethod
    def _lines(cls, value: list[str]) -> list[str]:
        for line in value:
            try:
                words = shlex.split(line)
            except ValueError as exc:
                raise ValueError(f"module line {line!r}: {exc}") from None
            if not words:
                raise ValueError("a module line is empty")
        return value

    @field_validator("prefix_env")
    @classmethod
    def _variable(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError(f"prefix_env must be an environment variable's name, got {value!r}")
        return value

    @model_validator(mode="after")
    def _by_kind(self) -> "PythonEnv":
        prefixed = [name for name in ("default", "prefix", "prefix_env") if getattr(self, name) is not None]
        if self.required:
            prefixed.append("required")
        if self.kind in ("none", "modules") and prefixed:
            raise ValueError(f"kind {self.kind} activates no environment: {', '.join(prefixed)} "
                             "belong to kind venv or conda")
        if self.kind == "none" and self.modules:
            raise ValueError("kind none runs nothing: module lines belong to kind modules (or venv, conda)")
        if self.kind == "modules" and not self.modules:
            raise ValueError("kind modules needs its module lines (modules: [...])")
        if self.kind != "conda" and self.conda != "conda":
            raise ValueError(f"conda is the conda executable of kind conda, not of kind {self.kind}")
        if self.required and self.prefix_env is None and self.prefix is None:
            raise ValueError("required needs prefix_env (the variable the user sets)")
        return self

    def what(self) -> str:
        """What the prefix holds, in words."""
        if self.description:
            return self.description
        return ("the conda environment with PyTorch, by name or absolute prefix" if self.kind == "conda"
                else "the absolute path of the virtual environment with PyTorch")

    def activation(self, environ: Mapping[str, str], where: str) -> tuple[PythonActivation | None, str | None]:
        """(the activation a plan made with ``environ`` writes, None) or (None, why the run cannot
        run); (None, None) for kind none. ``where`` names the profile in messages."""
        if self.kind == "none":
            return None, None
        words, missing = expand_references([shlex.split(line) for line in self.modules], environ)
        conda, more = expand_references(self.conda, environ)
        missing += [name for name in more if name not in missing]
        prefix: str | None = None
        given = ""  # where the prefix came from, for messages
        if self.prefix is not None:
            prefix, given = self.prefix, "python_env.prefix"
        elif self.prefix_env and environ.get(self.prefix_env):
            # The user's value, as given: no references are read in it.
            prefix, given = environ[self.prefix_env], f"${self.prefix_env}"
        elif self.default is not None:
            prefix, given = self.default, "python_env.default"
        if prefix is not None and given != f"${self.prefix_env}":
            prefix, more = expand_references(prefix, environ)
            missing += [name for name in more if name not in missing]
        problems = []
        if prefix is None and self.required:
            problems.append(f"set ${self.prefix_env} to {self.what()} (see {where} python_env)")
        if missing:
            problems.append(f"set {', '.join(f'${name}' for name in missing)} (read by {where} python_env)")
        if problems:
            return None, "; ".join(problems)
        if prefix is not None:
            # The script changes to the run directory: a relative path would be found there, not
            # where the user made the environment. A conda environment may also be given by name.
            named = self.kind == "conda" and "/" not in prefix
            if not named and not prefix.startswith("/"):
                return None, f"{given} must be an absolute path (the script runs in the run directory), got {prefix!r}"
        return PythonActivation(self.kind, tuple(tuple(line) for line in words), conda, prefix), None


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


@dataclass(frozen=True)
class ProfileSource:
    """Where a loaded profile's values were written: its file, the line of every value, and the
    system whose overrides were applied, so that a later check (orchestrator/plan/lints.py) can name
    ``sites/polaris.yaml:105 env.NCCL_NET`` as a load error would."""

    path: str
    lines: dict[Loc, int] = field(repr=False)
    system: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict, repr=False)  # ``systems.<system>`` as written

    def from_system(self, loc: Loc) -> bool:
        """Whether the value at ``loc`` of the merged profile came from the system's overrides (see
        _merge: REPLACED_BY_SYSTEM sections, lists and scalars replace the site's; other mappings
        merge key by key, so a key the system does not write is still the site's)."""
        node: Any = self.overrides
        for depth, part in enumerate(loc):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
            if (depth == 0 and part in REPLACED_BY_SYSTEM) or not isinstance(node, dict):
                return True
        return bool(loc)

    def file_loc(self, loc: Loc) -> Loc:
        """Where the value at ``loc`` of the merged profile is in the file: under ``systems.<system>``
        when the system's overrides gave it."""
        return ("systems", self.system) + tuple(loc) if self.system and self.from_system(loc) else tuple(loc)

    def locate(self, loc: Loc) -> tuple[str, int | None]:
        """(file, 1-based line) of the value at ``loc`` of the merged profile (the nearest enclosing
        value that has a line, as errors do)."""
        where = self.file_loc(loc)
        while where:
            if where in self.lines:
                return self.path, self.lines[where]
            where = where[:-1]
        return self.path, self.lines.get((), 1)


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
    # Directories put in front of a path-like variable (LD_LIBRARY_PATH, PATH, ...), first listed
    # first, keeping what the modules put there; a value in ``env`` is exported as written (quoted),
    # so it cannot. Exported after python_env, before ``env``.
    env_prepend: dict[str, list[str]] = Field(default_factory=dict)
    # Shell lines run first (``. /etc/profile``, ``module purge``, the site's base modules), each
    # re-quoted word by word; the Python environment itself is ``python_env``'s.
    setup: list[str] = Field(default_factory=list)
    # How the compute node gets the Python that runs the workloads (see PythonEnv).
    python_env: PythonEnv = Field(default_factory=PythonEnv)
    directives: list[str] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    # Options for the scheduler's executor, checked against its model in orchestrator/sites/schedulers.py
    # (SiteProfile._options); kept as written, read as that model by the executor.
    executor: dict[str, Any] = Field(default_factory=dict)
    price: Price | None = None
    network: Network | None = None  # for the time model; None: estimated from the device type
    systems: dict[str, dict[str, Any]] = Field(default_factory=dict)
    system: str | None = None  # set when a system's overrides were applied
    # True: the compute nodes see this host's node-local paths (/tmp, ...), because they run on it (the
    # sandbox's virtual nodes, a rehearsal on this machine): a run directory there is no mistake
    # (lint node-local-runs, orchestrator/plan/lints.py). The local and appliance schedulers run jobs
    # on this host by construction and need no such line.
    node_local_ok: bool = False
    # Where the values were written (set by load_site; None for a profile built in code).
    _source: ProfileSource | None = PrivateAttr(default=None)

    @field_validator("python", "template")
    @classmethod
    def _line(cls, value: str | None) -> str | None:
        return one_line_value(value)

    @field_validator("scheduler")
    @classmethod
    def _scheduler(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {value!r} (valid: {', '.join(SCHEDULERS.names())})")
        return value

    @field_validator("env_prepend")
    @classmethod
    def _prepend(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, directories in value.items():
            if not ENV_NAME.match(name):
                raise ValueError(f"env_prepend: {name!r} is not an environment variable's name")
            if not directories:
                raise ValueError(f"env_prepend.{name}: give at least one directory")
            for directory in directories:
                if not directory or ":" in directory:  # ':' separates the entries of a path variable
                    raise ValueError(f"env_prepend.{name}: {directory!r} is not one directory")
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

    @property
    def profile_label(self) -> str:
        """The profile in messages: ``sites/<name>.yaml`` (and its system)."""
        return f"sites/{self.name}.yaml" + (f" (system {self.system})" if self.system else "")

    def with_overrides(self, overrides: Mapping[str, Any]) -> "SiteProfile":
        """This profile as a sweep's ``site_overrides`` changes it (orchestrator/plan/sweep.py
        SiteOverride, validated there): ``setup`` replaces the profile's lines; ``env`` and
        ``env_prepend`` are merged key by key (an ``env`` value of None removes the variable);
        ``python_env`` is merged key by key, or replaces the profile's when it names a ``kind``
        (another kind of environment shares nothing with the profile's). Raises ValueError when
        the merged python_env is not valid."""
        update: dict[str, Any] = {}
        if overrides.get("setup") is not None:
            update["setup"] = list(overrides["setup"])
        if overrides.get("env") is not None:
            env = {**self.env, **overrides["env"]}
            update["env"] = {name: value for name, value in env.items() if value is not None}
        if overrides.get("env_prepend") is not None:
            update["env_prepend"] = {**self.env_prepend, **overrides["env_prepend"]}
        given = overrides.get("python_env")
        if given is not None:
            base = {} if "kind" in given else self.python_env.model_dump(exclude_unset=True)
            if given.keys() & {"modules", "prefix", "prefix_env", "default"}:
                base.pop("torch", None)  # another environment: the profile's torch is not known to hold
            try:
                update["python_env"] = PythonEnv.model_validate({**base, **given})
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(part) for part in first["loc"])
                raise ValueError(f"python_env{'.' + field if field else ''}: "
                                 f"{str(first['msg']).removeprefix('Value error, ')}") from None
        # model_copy keeps the private attributes (where the profile's values were written).
        return self.model_copy(update=update) if update else self

    @property
    def target(self) -> str:
        """``site`` or ``site:system``, as a sweep names it."""
        return f"{self.name}:{self.system}" if self.system else self.name

    @property
    def source(self) -> ProfileSource | None:
        """Where the profile's values were written (None for a profile not loaded from a file)."""
        return self._source

    def locate(self, loc: Loc) -> tuple[str | None, int | None]:
        """(file, line) of the value at ``loc`` (e.g. ``("env", "NCCL_NET")``); (None, None) when the
        profile was not loaded from a file."""
        return self._source.locate(loc) if self._source is not None else (None, None)


# A system is another machine: these sections of its overrides replace the site's wholesale
# (nothing of one machine's device or launcher leaks into another's); other mappings merge.
# python_env too: one machine's modules and environment mean nothing on another.
REPLACED_BY_SYSTEM = ("device", "node", "resources", "launcher", "price", "network", "python_env")


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


MAX_SITE_NAME = 100  # orchestrator.plan.sweep.MAX_NAME: what a sweep may name


def find_site_file(name: str, sites_dirs: list[Path] | None = None) -> Path:
    # A site name becomes a file name: a long one made the file system refuse the look-up
    # (OSError: File name too long), and a slash would look outside the sites folders.
    if not name or len(name) > MAX_SITE_NAME or "/" in name or os.sep in name or name.startswith("."):
        shown = repr(name) if len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"
        raise UserError(f"site {shown}: expected a site name (at most {MAX_SITE_NAME} characters, no '/', "
                        "not starting with '.')")
    for directory in paths.sites_search_path(sites_dirs):
        candidate = directory / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    sites = available_sites(sites_dirs)
    known = ", ".join(sites) or "none"
    raise UserError(f"unknown site {name!r}{did_you_mean(name, sites)} (known: {known}; "
                    f"add one as <dir>/{name}.yaml with --sites-dir or ORCH_SITES_PATH)")


def available_sites(sites_dirs: list[Path] | None = None) -> list[str]:
    names: set[str] = set()
    for directory in paths.sites_search_path(sites_dirs):
        if directory.is_dir():
            names.update(p.stem for p in directory.glob("*.yaml"))
    return sorted(names)


def _systems_of(doc: YamlDocument) -> dict[str, dict[str, Any]]:
    """``systems`` as written (a missing system's overrides: {}), its shape checked before
    anything reads it: a list, a number or a system that is not a mapping was a traceback
    wherever a system was merged or listed."""
    raw = doc.data.get("systems")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise doc.error(("systems",), "expected a mapping: system name -> the values that system overrides")
    for key, value in raw.items():
        if not isinstance(key, str):
            raise doc.error(("systems",), f"expected a system name (text), got {key!r}")
        if value is not None and not isinstance(value, dict):
            raise doc.error(("systems", key), "expected a mapping of the values this system overrides")
    return {key: value or {} for key, value in raw.items()}


def load_site(target: str, sites_dirs: list[Path] | None = None) -> SiteProfile:
    """The profile for ``site`` or ``site:system``; errors name the YAML file and line."""
    name, _, system = target.partition(":")
    path = find_site_file(name, sites_dirs)
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping (a site profile)")
    data = doc.data
    systems = _systems_of(doc)
    if system:
        if system not in systems:
            raise doc.error(("systems",), f"site {name!r} has no system {system!r} "
                                          f"(known: {', '.join(systems) or 'none'})")
        data = _merge({k: v for k, v in data.items() if k != "systems"}, systems[system], top=True)
        data["system"] = system

    def located(loc: tuple[Any, ...]) -> tuple[Any, ...]:  # a system's value is in its overrides
        if system and loc and loc[0] in systems[system]:
            return ("systems", system) + loc
        return loc

    try:
        profile = SiteProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == OPTION_ERROR:  # an executor or launcher option: located by SiteProfile._options
            ctx = first["ctx"]
            raise SourceError(doc.path, doc.line_of(located(tuple(ctx["line_at"]))),
                              format_loc(located(tuple(ctx["field"]))) or None, ctx["message"]) from None
        in_data, key_note = data_loc(data, tuple(first["loc"]), first["type"])
        message = ("unknown field" if first["type"] == "extra_forbidden"
                   else str(first["msg"]).removeprefix("Value error, "))
        raise doc.error(located(in_data), key_note or message) from None
    overrides = systems[system] if system else {}
    profile._source = ProfileSource(doc.path, doc.lines, system or None, overrides)
    return profile
