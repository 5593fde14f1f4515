"""Stage 1: the sweep file, parsed and validated into typed objects.

A sweep has a name and experiments; an experiment names a workload, the sites
(``site`` or ``site:system``) and a parameter grid. Lists in ``grid`` expand as a
cross product, each named group under ``zip`` expands its lists together, and
``exclude`` rules drop combinations. Any error names file, line and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.timefmt import parse_walltime
from orchestrator.yamlsource import Loc, YamlDocument, load_yaml
from workloads import registry
from workloads.registry import PRECISIONS, Workload

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
RETRYABLE = ("timeout", "out_of_memory", "node_failure", "preempted", "cancelled", "failed",
             "launch_error", "missing_metrics", "bad_metrics", "lost")

# Axes every workload understands, with the check each value must pass.
CORE_AXES = ("devices", "precision")
OPTIONAL_AXES = ("strategy", "batch_size", "seq_len")
ALL_FIRST_CLASS = CORE_AXES + OPTIONAL_AXES + ("repeats",)


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(1, ge=1, le=20, description="attempts per run, the first included")
    # Not "on": YAML 1.1 reads an unquoted `on` key as the boolean true.
    failures: list[Literal[RETRYABLE]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: ["timeout", "node_failure", "preempted", "lost"],
        description="failure classes that are retried",
    )


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    workload: str
    sites: list[str] = Field(min_length=1)
    walltime: str | int = "00:30:00"
    # A queue/partition by name (e.g. devel, preemptable); default: the site picks by size and walltime.
    queue: str | None = None
    # false: run even what the memory model predicts will not fit (to measure where it breaks)
    check_memory: bool = True
    grid: dict[str, Any] = Field(default_factory=dict)
    zip: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    retry: RetryPolicy | None = None

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, value: str | int) -> str | int:
        parse_walltime(value)
        return value

    @field_validator("sites")
    @classmethod
    def _sites(cls, value: list[str]) -> list[str]:
        import re

        for entry in value:
            if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*)?$", entry):
                raise ValueError(f"expected 'site' or 'site:system', got {entry!r}")
        return value

    @property
    def walltime_s(self) -> int:
        return parse_walltime(self.walltime)


class Variant(BaseModel):
    """Overrides for a rehearsal or a scaled-down copy of the sweep (``--variant NAME``).

    ``sites`` and ``walltime`` replace every experiment's; ``grid`` replaces the values of
    keys an experiment's grid already has; ``zip`` replaces zip groups of the same name;
    ``experiments`` holds per-experiment overrides (by name) of any experiment field,
    their ``grid`` entries added or replaced one key at a time."""

    model_config = ConfigDict(extra="forbid")
    description: str = ""
    sites: list[str] | None = None
    walltime: str | int | None = None
    grid: dict[str, Any] = Field(default_factory=dict)
    zip: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)
    experiments: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Sweep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    variants: dict[str, Variant] = Field(default_factory=dict)
    experiments: list[Experiment] = Field(min_length=1)


class LoadedSweep(BaseModel):
    """A validated sweep with the text it came from (kept for provenance)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    sweep: Sweep
    path: str
    text: str


def _pydantic_message(error: dict[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _check_value(doc: YamlDocument, loc: Loc, axis: str, value: Any, workload: Workload) -> None:
    """One grid value against the axis's type; raises SourceError naming where it is."""

    def fail(expected: str) -> None:
        raise doc.error(loc, f"expected {expected}, got {value!r}")

    if axis in ("devices", "batch_size", "seq_len", "repeats"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            fail("a positive integer")
    elif axis == "precision":
        if value not in PRECISIONS:
            fail("one of " + ", ".join(PRECISIONS))
        if value not in workload.precisions:
            raise doc.error(loc, f"workload {workload.name} does not support precision {value!r}")
    elif axis == "strategy":
        if value not in workload.strategies:
            fail(f"a strategy of {workload.name}: " + ", ".join(workload.strategies))
    else:
        param = workload.param(axis)
        assert param is not None
        ok = {
            int: isinstance(value, int) and not isinstance(value, bool),
            float: isinstance(value, (int, float)) and not isinstance(value, bool),
            bool: isinstance(value, bool),
            str: isinstance(value, (str, int, float)) and not isinstance(value, bool),
        }.get(param.type, True)
        if not ok:
            fail(f"{param.type.__name__} for {workload.name} parameter {axis!r}")
        if param.choices is not None and value not in param.choices:
            fail("one of " + ", ".join(map(str, param.choices)))


def _check_axis_name(doc: YamlDocument, loc: Loc, axis: str, workload: Workload) -> None:
    if axis in CORE_AXES or axis == "repeats":
        return
    if axis in OPTIONAL_AXES:
        if axis not in workload.axes and not (axis == "strategy" and len(workload.strategies) > 1):
            raise doc.error(loc, f"unknown field: workload {workload.name} does not take {axis!r}")
        return
    if workload.param(axis) is None:
        known = sorted(set(ALL_FIRST_CLASS) | {p.name for p in workload.params})
        raise doc.error(loc, f"unknown field for workload {workload.name} (expected one of: {', '.join(known)})")


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _check_experiment(doc: YamlDocument, index: int, exp: Experiment) -> None:
    base: Loc = ("experiments", index)
    try:
        workload = registry.get(exp.workload)
    except KeyError as exc:
        raise doc.error(base + ("workload",), str(exc.args[0])) from None

    zipped: dict[str, str] = {}
    for group, columns in exp.zip.items():
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise doc.error(base + ("zip", group), f"lists in a zip group must have equal lengths, got {sorted(lengths)}")
        for axis, values in columns.items():
            loc = base + ("zip", group, axis)
            _check_axis_name(doc, loc, axis, workload)
            if axis in exp.grid or axis in zipped:
                raise doc.error(loc, f"axis {axis!r} is given more than once (grid and zip groups must not overlap)")
            if axis == "repeats":
                raise doc.error(loc, "repeats is a count, not an axis: put it in grid as one integer")
            zipped[axis] = group
            for i, value in enumerate(values):
                _check_value(doc, loc + (i,), axis, value, workload)

    for axis, value in exp.grid.items():
        loc = base + ("grid", axis)
        _check_axis_name(doc, loc, axis, workload)
        if axis == "repeats":
            _check_value(doc, loc, axis, value, workload)
            continue
        if isinstance(value, list) and not value:
            raise doc.error(loc, "expected at least one value")
        for i, item in enumerate(_values(value)):
            _check_value(doc, loc + (i,) if isinstance(value, list) else loc, axis, item, workload)

    for i, rule in enumerate(exp.exclude):
        for axis in rule:
            if axis not in exp.grid and axis not in zipped and axis not in ("site", "system"):
                raise doc.error(base + ("exclude", i, axis), "exclude names an axis that is not in grid or zip")


def _apply_variant(doc: YamlDocument, name: str) -> None:
    """Rewrite ``doc.data`` with variant ``name`` applied (validated first)."""
    data = doc.data
    variants = data.get("variants") or {}
    if not isinstance(variants, dict) or name not in variants:
        known = ", ".join(variants) if isinstance(variants, dict) and variants else "none"
        raise doc.error(("variants",), f"no variant {name!r} (variants: {known})")
    try:
        variant = Variant.model_validate(variants[name])
    except ValidationError as exc:
        first = exc.errors()[0]
        raise doc.error(("variants", name) + tuple(first["loc"]), _pydantic_message(first)) from None
    experiments = data.get("experiments")
    if not isinstance(experiments, list):
        return  # the normal validation reports it
    names = {e.get("name") for e in experiments if isinstance(e, dict)}
    for unknown in set(variant.experiments) - names:
        raise doc.error(("variants", name, "experiments", unknown), "no experiment of that name")
    for exp in experiments:
        if not isinstance(exp, dict):
            continue
        if variant.sites is not None:
            exp["sites"] = list(variant.sites)
        if variant.walltime is not None:
            exp["walltime"] = variant.walltime
        grid = exp.setdefault("grid", {})
        if isinstance(grid, dict):
            grid.update({k: v for k, v in variant.grid.items() if k in grid})
        groups = exp.get("zip")
        if isinstance(groups, dict):
            groups.update({k: v for k, v in variant.zip.items() if k in groups})
        for key, value in variant.experiments.get(exp.get("name"), {}).items():
            if key == "grid" and isinstance(value, dict) and isinstance(exp.get("grid"), dict):
                exp["grid"].update(value)
            else:
                exp[key] = value
    data["name"] = f"{data.get('name')}-{name}"


def parse_sweep(path: Path | str, text: str | None = None, variant: str | None = None) -> LoadedSweep:
    """Load and validate a sweep file; every problem is a SourceError (file:line: field: what).

    With ``variant`` the named overrides are applied first and the sweep is named
    ``<name>-<variant>``, so its results never mix with the full-size ones."""
    doc = load_yaml(path, text)
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping with 'name' and 'experiments' at the top level")
    if variant is not None:
        _apply_variant(doc, variant)
    try:
        sweep = Sweep.model_validate(doc.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise doc.error(tuple(first["loc"]), _pydantic_message(first)) from None
    names: set[str] = set()
    for index, exp in enumerate(sweep.experiments):
        if exp.name in names:
            raise doc.error(("experiments", index, "name"), f"experiment name {exp.name!r} is used twice")
        names.add(exp.name)
        _check_experiment(doc, index, exp)
    source = text if text is not None else Path(path).read_text(encoding="utf-8")
    return LoadedSweep(sweep=sweep, path=str(path), text=source)
