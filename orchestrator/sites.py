"""Site profiles: one YAML file per site, validated, found on a search path.

Sites are data: scheduler, queues and their limits, node layout, device peaks,
launcher, environment. A site with several systems (the ALCF AI Testbed) lists
per-system overrides under ``systems``; ``site:system`` selects one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.timefmt import parse_walltime
from orchestrator.yamlsource import load_yaml
from workloads.registry import PRECISIONS

DEVICE_TYPES = ("cpu", "cuda", "xpu", "hpu", "rdu", "ipu", "wse", "lpu")


class Queue(BaseModel):
    """A partition (Slurm) or queue (PBS) and the limits orch picks it by."""

    model_config = ConfigDict(extra="forbid")
    name: str
    min_nodes: int = Field(1, ge=1)
    max_nodes: int = Field(ge=1)
    max_walltime: str | int
    min_devices: int = Field(1, ge=1)
    max_devices: int | None = Field(None, ge=1)
    max_jobs_per_user: int | None = None
    max_queued_per_user: int | None = None
    qos: str | None = None
    # Scheduler-specific extra directives for this queue (validated when rendered).
    directives: list[str] = Field(default_factory=list)
    note: str = ""

    @field_validator("max_walltime")
    @classmethod
    def _walltime(cls, value: str | int) -> str | int:
        parse_walltime(value)
        return value

    @property
    def max_walltime_s(self) -> int:
        return parse_walltime(self.max_walltime)


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal[DEVICE_TYPES]  # type: ignore[valid-type]
    model: str
    per_node: int = Field(ge=1)
    memory_gb: float | None = Field(None, gt=0)
    bandwidth_gbs: float | None = Field(None, gt=0)
    peak_tflops: dict[str, float] = Field(default_factory=dict)
    precisions: list[Literal[PRECISIONS]] = Field(default_factory=lambda: ["fp32"])  # type: ignore[valid-type]
    # "power_of_two": device counts must be 1, 2, 4, ... (Graphcore IPUs).
    counts: Literal["any", "power_of_two"] = "any"

    @field_validator("peak_tflops")
    @classmethod
    def _peaks(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key not in PRECISIONS + ("fp64",):
                raise ValueError(f"unknown precision {key!r} in peak_tflops")
        return value


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: int | None = Field(None, ge=1)
    memory_gb: float | None = Field(None, gt=0)


class Launcher(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "python"
    # Extra launcher arguments, each quoted when rendered.
    args: list[str] = Field(default_factory=list)


class Account(BaseModel):
    """Where the project/account and QoS come from: the user's environment, never the profile."""

    model_config = ConfigDict(extra="forbid")
    env: str = "ORCH_ACCOUNT"
    required: bool = False
    qos_env: str = "ORCH_QOS"


class SiteProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    scheduler: Literal["local", "slurm", "pbs", "appliance"]
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
    executor: dict[str, Any] = Field(default_factory=dict)  # options for the executor
    cost_per_node_hour: float | None = Field(None, ge=0)
    systems: dict[str, dict[str, Any]] = Field(default_factory=dict)
    system: str | None = None  # set when a system's overrides were applied

    @model_validator(mode="after")
    def _consistent(self) -> "SiteProfile":
        for queue in self.queues:
            if queue.min_nodes > queue.max_nodes:
                raise ValueError(f"queue {queue.name}: min_nodes > max_nodes")
        return self

    @property
    def template_name(self) -> str:
        return self.template or f"{self.scheduler}.sh.j2"

    def peak(self, precision: str) -> float | None:
        return self.device.peak_tflops.get(precision)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
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
    raise UserError(f"unknown site {name!r} (known: {known}; add one as <dir>/{name}.yaml with --sites-dir or ORCH_SITES_PATH)")


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
        data = _merge({k: v for k, v in data.items() if k != "systems"}, systems[system])
        data["system"] = system
    try:
        return SiteProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        if system and loc and loc[0] in (doc.data.get("systems") or {}).get(system, {}):
            loc = ("systems", system) + loc
        message = "unknown field" if first["type"] == "extra_forbidden" else str(first["msg"]).removeprefix("Value error, ")
        raise doc.error(loc, message) from None
