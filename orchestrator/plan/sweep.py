"""Stage 1: the sweep file, parsed and validated into typed objects.

A sweep has a name and experiments; an experiment names a workload, the sites
(``site`` or ``site:system``) and a parameter grid. Lists in ``grid`` expand as a
cross product, each named group under ``zip`` expands its lists together, and
``exclude`` rules drop combinations. Any error names file, line and field.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.errors import SourceError, SourceErrors, UserError, did_you_mean, raise_all
from orchestrator.sites.profiles import ENV_NAME, PYTHON_ENV_KINDS
from orchestrator.states import FailureClass
from orchestrator.timefmt import parse_walltime
from orchestrator.yamlsource import Loc, YamlDocument, data_loc, format_loc, load_yaml, read_source
from workloads import registry
from workloads.registry import PRECISIONS, Workload

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
# Names become file and directory names (runs/<sweep>/..., sites/<site>.yaml): well under the
# 255-byte limit of a file name.
MAX_NAME = 100
# What the database columns and the workload's command line can carry: 64-bit integers, and
# values well under Linux's 128 KiB limit on one command-line argument.
INT64_MAX = 2**63 - 1
MAX_VALUE_CHARS = 16 * 1024
# Expanding more runs than this is refused before expanding (orch plan/run --max-runs): planning
# runs at ~10,000 a second here, and a campaign of more jobs than this is a mistake more often
# than a plan.
DEFAULT_MAX_RUNS = 50_000
# Lowest values the workload harness accepts (workloads/harness/cli.py).
PARAM_MINIMUMS = {"warmup": 0, "iters": 1}
# Every failure class may be retried. Plain strings: validation messages and run records spell
# them as the sweep file does.
RETRYABLE = tuple(failure.value for failure in FailureClass)
DEFAULT_RETRY = (FailureClass.TIMEOUT, FailureClass.NODE_FAILURE, FailureClass.PREEMPTED, FailureClass.LOST)

# What a run predicted to take longer than its walltime becomes: planned with a warning (the
# prediction may be wrong, and a timeout is a result too) or skipped with both figures.
OVER_WALLTIME = ("warn", "skip")

# Axes every workload understands, with the check each value must pass.
CORE_AXES = ("devices", "precision")
OPTIONAL_AXES = ("strategy", "batch_size", "seq_len")
ALL_FIRST_CLASS = CORE_AXES + OPTIONAL_AXES + ("repeats",)


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_attempts: int = Field(1, ge=1, le=20, description="attempts per run, the first included")
    # Not "on": YAML 1.1 reads an unquoted `on` key as the boolean true.
    failures: list[Literal[RETRYABLE]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: [failure.value for failure in DEFAULT_RETRY],
        description="failure classes that are retried",
    )


# ``site`` or ``site:system``, as an experiment's ``sites`` and ``site_overrides`` name them.
SITE_TARGET = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*)?\Z"


def _shell_lines(value: list[str] | None, what: str) -> list[str] | None:
    """Lines the script runs re-quoted word by word (orchestrator/plan/render.py shell_line): each
    must split into words, so a mistake is the sweep's error, with its line, not the render's."""
    for line in value or []:
        try:
            shlex.split(line)
        except ValueError as exc:
            raise ValueError(f"{what} {line!r}: {exc}") from None
    return value


class PythonEnvOverride(BaseModel):
    """A site's ``python_env`` as a sweep changes it (orchestrator/sites/profiles.py PythonEnv):
    the keys given, checked here one by one; the profile's python_env with them applied is
    checked as a whole when the plan resolves the site."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal[PYTHON_ENV_KINDS] | None = None  # type: ignore[valid-type]
    modules: list[str] | None = None
    conda: str | None = None
    default: str | None = None
    prefix: str | None = None
    prefix_env: str | None = None
    required: bool | None = None
    description: str | None = None
    source: str | None = None

    @field_validator("modules")
    @classmethod
    def _modules(cls, value: list[str] | None) -> list[str] | None:
        return _shell_lines(value, "module line")

    @field_validator("prefix_env")
    @classmethod
    def _variable(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError(f"expected an environment variable's name, got {value[:120]!r}")
        return value


class SiteOverride(BaseModel):
    """What a sweep changes in a site's profile for its runs, without a copy of the profile
    (orchestrator/sites/profiles.py SiteProfile.with_overrides applies it): ``setup`` replaces the
    profile's lines; ``env`` and ``env_prepend`` are merged key by key (``env: {NAME: null}``
    removes a variable the profile sets); ``python_env`` is merged key by key (``{prefix:
    /path/to/venv}``), or replaces the profile's when it names a ``kind``.

    Not part of a run's id (the same run, in another environment): it is carried by the run's
    spec, and re-planning renders the script again from it."""

    model_config = ConfigDict(extra="forbid")
    setup: list[str] | None = None
    env: dict[str, str | None] | None = None
    env_prepend: dict[str, list[str]] | None = None
    python_env: PythonEnvOverride | None = None

    @field_validator("setup")
    @classmethod
    def _setup(cls, value: list[str] | None) -> list[str] | None:
        return _shell_lines(value, "setup line")

    @field_validator("env", "env_prepend")
    @classmethod
    def _names(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        for name, entry in (value or {}).items():
            if not ENV_NAME.match(name):
                raise ValueError(f"expected environment variable names, got {name[:120]!r}")
            if isinstance(entry, list) and (not entry or any(not d or ":" in d for d in entry)):
                raise ValueError(f"{name}: expected a list of directories (none empty, none with ':')")
        return value


def _check_site_overrides(value: dict[str, SiteOverride]) -> dict[str, SiteOverride]:
    for target in value:
        if not re.match(SITE_TARGET, target):
            raise ValueError(f"expected 'site' or 'site:system' keys, got {target[:120]!r}")
    return value


def merge_site_overrides(layers: list[SiteOverride | None]) -> dict[str, Any] | None:
    """The overrides of the ``layers`` (least specific first) as one mapping of the keys given,
    each layer's applied over the ones before it as SiteProfile.with_overrides applies them to the
    profile; None when no layer gives anything."""
    out: dict[str, Any] = {}
    for layer in layers:
        if layer is None:
            continue
        given = {key: value for key, value in layer.model_dump(exclude_unset=True).items() if value is not None}
        if "setup" in given:
            out["setup"] = list(given["setup"])
        for key in ("env", "env_prepend"):
            if key in given:
                out[key] = {**out.get(key, {}), **given[key]}
        if "python_env" in given:
            python_env = given["python_env"]
            out["python_env"] = dict(python_env) if "kind" in python_env else {
                **out.get("python_env", {}), **python_env}
    return out or None


# An item id of the studies' setups (shared/reference/study-setups.yaml), e.g. 000-W2, 001-E7.
SETUP_ID = r"^\d{3}-[A-Z]+\d+$"


class SetupRef(BaseModel):
    """The entry of the studies' setups (shared/reference/study-setups.yaml) an experiment
    reproduces; tests/unit/test_study_setups.py holds the experiment's grid to its values."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=SETUP_ID)
    # The entry's per_system row, by the start of its ``system`` (or ``model``) text, where the
    # entry sets values per system: "A100", "Cerebras CS-2", "13B".
    system: str | None = Field(None, max_length=MAX_NAME)


class NotPlanned(BaseModel):
    """A value of a study's setup that the example does not plan, and why (orch cannot express
    it, or the site cannot hold it); docs/studies.md's Missing column names each ``what``."""

    model_config = ConfigDict(extra="forbid")
    setup: str = Field(pattern=SETUP_ID)
    system: str | None = Field(None, max_length=MAX_NAME)
    field: str = Field(min_length=1, max_length=MAX_NAME)
    what: str = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1)


class Experiment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME)
    description: str = ""
    workload: str
    sites: list[str] = Field(min_length=1)
    walltime: str | int = "00:30:00"
    # A queue/partition by name (e.g. devel, preemptable); default: the site picks by size and walltime.
    queue: str | None = None
    # false: run even what the memory model predicts will not fit (to measure where it breaks)
    check_memory: bool = True
    # true: a run smaller than a node may share the node with other jobs (no --exclusive /
    # place=excl); by default a benchmark run never shares what it measures.
    share: bool = False
    # warn | skip a run whose predicted run time exceeds its walltime; unset: the sweep's.
    over_walltime: Literal[OVER_WALLTIME] | None = None  # type: ignore[valid-type]
    grid: dict[str, Any] = Field(default_factory=dict)
    zip: dict[str, dict[str, list[Any]]] = Field(default_factory=dict)
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    retry: RetryPolicy | None = None
    # A site's setup, env and python_env as this experiment's runs use them (SiteOverride), by
    # ``site`` or ``site:system``; applied over the sweep's own ``site_overrides``.
    site_overrides: dict[str, SiteOverride] = Field(default_factory=dict)
    # The study setup this experiment reproduces (study examples; no effect on the plan).
    setup: SetupRef | None = None

    @field_validator("site_overrides")
    @classmethod
    def _overrides(cls, value: dict[str, SiteOverride]) -> dict[str, SiteOverride]:
        return _check_site_overrides(value)

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, value: str | int) -> str | int:
        if value != "auto":  # auto: the predicted run time plus a margin (resolve.auto_walltime)
            parse_walltime(value)
        return value

    @field_validator("sites")
    @classmethod
    def _sites(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not re.match(SITE_TARGET, entry):
                raise ValueError(f"expected 'site' or 'site:system', got {entry[:120]!r}")
            if any(len(part) > MAX_NAME for part in entry.split(":")):
                raise ValueError(f"a site or system name is at most {MAX_NAME} characters, got {len(entry)}")
        return value

    @property
    def walltime_s(self) -> int:
        # 0 stands for auto (orchestrator.plan.resolve.AUTO_WALLTIME): the resolver predicts it per run.
        return 0 if self.walltime == "auto" else parse_walltime(self.walltime)


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
    name: str = Field(pattern=NAME_PATTERN, max_length=MAX_NAME)
    description: str = ""
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    # warn (default): a run predicted to outlast its walltime is planned, and the plan warns;
    # skip: it is skipped with both figures. An experiment's own over_walltime wins.
    over_walltime: Literal[OVER_WALLTIME] = "warn"  # type: ignore[valid-type]
    variants: dict[str, Variant] = Field(default_factory=dict)
    # A site's setup, env and python_env as every run of the sweep on it uses them (SiteOverride),
    # by ``site`` (every system of it) or ``site:system``: no copy of the profile needed.
    site_overrides: dict[str, SiteOverride] = Field(default_factory=dict)
    # The study's setup values this example does not plan, each with its reason (no effect on the plan).
    not_planned: list[NotPlanned] = Field(default_factory=list)
    experiments: list[Experiment] = Field(min_length=1)

    @field_validator("site_overrides")
    @classmethod
    def _overrides(cls, value: dict[str, SiteOverride]) -> dict[str, SiteOverride]:
        return _check_site_overrides(value)

    def site_overrides_for(self, exp: Experiment, site: str, system: str | None) -> dict[str, Any] | None:
        """What the sweep and ``exp`` change in ``site`` (``site:system``) for the experiment's runs:
        the sweep's, then the experiment's, each for the site, then for the system."""
        targets = [site] + ([f"{site}:{system}"] if system else [])
        return merge_site_overrides([layer.get(target) for layer in (self.site_overrides, exp.site_overrides)
                                     for target in targets])


class LoadedSweep(BaseModel):
    """A validated sweep with the text it came from (kept for provenance)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    sweep: Sweep
    path: str
    text: str


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model (Sweep, Experiment, RetryPolicy, ...) whose fields a value at ``loc`` is among,
    following list indexes and mapping keys; None where ``loc`` leaves the models."""
    parts = list(loc)
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        if field is None:
            return None
        inner, container = _model_in(field.annotation)
        if inner is None:
            return None
        model = inner
        if container and parts:
            parts.pop(0)  # the list's index or the mapping's key
    return model


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model an annotation holds (``Experiment``, ``list[Experiment]``, ``RetryPolicy | None``)
    and whether it is inside a list or mapping."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in get_args(annotation):
        found, inside = _model_in(arg)
        if found is not None:
            return found, inside or get_origin(annotation) in (list, dict)
    return None, False


def _pydantic_message(error: Mapping[str, Any], data: Any = None) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        loc = tuple(error["loc"])
        model = _model_at(Sweep, loc[:-1]) if isinstance(data, dict) and loc else None
        return "unknown field" + (did_you_mean(loc[-1], list(model.model_fields)) if model else "")
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")


def _check_value(doc: YamlDocument, loc: Loc, axis: str, value: Any, workload: Workload) -> None:
    """One grid value against the axis's type; raises SourceError naming where it is."""

    def fail(expected: str, hint: str = "") -> None:
        shown = repr(value)
        raise doc.error(loc, f"expected {expected}, got {shown if len(shown) <= 120 else shown[:100] + '...'}{hint}")

    # What any value must be to reach the database as JSON and the workload as one argument.
    if isinstance(value, float) and not math.isfinite(value):
        fail("a finite number (params are stored as JSON, which has no NaN or infinity)")
    if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
        fail(f"an integer between {-INT64_MAX - 1} and {INT64_MAX}")
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            raise doc.error(loc, f"a value is at most {MAX_VALUE_CHARS} characters, got {len(value)}")
        if value.startswith("-"):
            fail("a value that does not start with '-' (the workload would read it as an option)")

    if axis in ("devices", "batch_size", "seq_len", "repeats"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            fail("a positive integer")
    elif axis == "precision":
        if value not in PRECISIONS:
            fail("one of " + ", ".join(PRECISIONS), did_you_mean(value, PRECISIONS))
        if value not in workload.precisions:
            raise doc.error(loc, f"workload {workload.name} does not support precision {value!r}")
    elif axis == "strategy":
        if value not in workload.strategies:
            fail(f"a strategy of {workload.name}: " + ", ".join(workload.strategies),
                 did_you_mean(value, workload.strategies))
    else:
        param = workload.param(axis)
        assert param is not None
        if isinstance(value, bool) and param.type is str and param.choices is not None and "true" in param.choices:
            value = "true" if value else "false"  # a tri-state (auto | true | false) written as a YAML bool
        ok = {
            int: isinstance(value, int) and not isinstance(value, bool),
            float: isinstance(value, (int, float)) and not isinstance(value, bool),
            bool: isinstance(value, bool),
            str: isinstance(value, (str, int, float)) and not isinstance(value, bool),
        }.get(param.type, True)
        if not ok:
            fail(f"{param.type.__name__} for {workload.name} parameter {axis!r}")
        if param.choices is not None and value not in param.choices:
            fail("one of " + ", ".join(map(str, param.choices)), did_you_mean(value, map(str, param.choices)))
        if axis in PARAM_MINIMUMS and isinstance(value, int) and value < PARAM_MINIMUMS[axis]:
            fail(f"an integer >= {PARAM_MINIMUMS[axis]}")


def _check_axis_name(doc: YamlDocument, loc: Loc, axis: str, workload: Workload) -> None:
    if axis in CORE_AXES or axis == "repeats":
        return
    if axis in OPTIONAL_AXES:
        if axis not in workload.axes and not (axis == "strategy" and len(workload.strategies) > 1):
            raise doc.error(loc, f"unknown field: workload {workload.name} does not take {axis!r}")
        return
    if workload.param(axis) is None:
        known = sorted(set(ALL_FIRST_CLASS) | {p.name for p in workload.params})
        raise doc.error(loc, f"unknown field for workload {workload.name}{did_you_mean(axis, known)} "
                             f"(expected one of: {', '.join(known)})")


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _collect(errors: list[SourceError], check: Callable[..., None], *args: Any) -> bool:
    """``check(*args)``, its SourceError added to ``errors``; whether it passed."""
    try:
        check(*args)
    except SourceErrors as exc:
        errors.extend(exc.errors)
        return False
    except SourceError as exc:
        errors.append(exc)
        return False
    return True


def _check_experiment(doc: YamlDocument, index: int, exp: Experiment) -> list[SourceError]:
    """Every mistake of the experiment's grid, zip and exclude rules (each axis checked on its own)."""
    base: Loc = ("experiments", index)
    try:
        workload = registry.get(exp.workload)
    except KeyError as exc:
        return [doc.error(base + ("workload",), str(exc.args[0]))]
    errors: list[SourceError] = []
    zipped: dict[str, str] = {}
    for group, columns in exp.zip.items():
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            errors.append(doc.error(base + ("zip", group),
                                    f"lists in a zip group must have equal lengths, got {sorted(lengths)}"))
        for axis, values in columns.items():
            _collect(errors, _check_zip_axis, doc, base + ("zip", group, axis), axis, values, workload, exp, zipped)
            zipped[axis] = group
    for axis, value in exp.grid.items():
        _collect(errors, _check_grid_axis, doc, base + ("grid", axis), axis, value, workload)
    for i, rule in enumerate(exp.exclude):
        for axis in rule:
            if axis not in exp.grid and axis not in zipped and axis not in ("site", "system"):
                errors.append(doc.error(base + ("exclude", i, axis),
                                        "exclude names an axis that is not in grid or zip"))
    return errors


def _check_zip_axis(doc: YamlDocument, loc: Loc, axis: str, values: list[Any], workload: Workload,
                    exp: Experiment, zipped: dict[str, str]) -> None:
    _check_axis_name(doc, loc, axis, workload)
    if axis in exp.grid or axis in zipped:
        raise doc.error(loc, f"axis {axis!r} is given more than once (grid and zip groups must not overlap)")
    if axis == "repeats":
        raise doc.error(loc, "repeats is a count, not an axis: put it in grid as one integer")
    errors: list[SourceError] = []
    for i, value in enumerate(values):
        _collect(errors, _check_value, doc, loc + (i,), axis, value, workload)
    raise_all(errors)


def _check_grid_axis(doc: YamlDocument, loc: Loc, axis: str, value: Any, workload: Workload) -> None:
    _check_axis_name(doc, loc, axis, workload)
    if axis == "repeats":
        _check_value(doc, loc, axis, value, workload)
        return
    if isinstance(value, list) and not value:
        raise doc.error(loc, "expected at least one value")
    errors: list[SourceError] = []
    for i, item in enumerate(_values(value)):
        _collect(errors, _check_value, doc, loc + (i,) if isinstance(value, list) else loc, axis, item, workload)
    raise_all(errors)


def count_runs(exp: Experiment) -> int:
    """How many runs the experiment expands to before exclusions (computed, not expanded)."""
    count = len(exp.sites) * int(exp.grid.get("repeats", 1))
    for axis, value in exp.grid.items():
        if axis != "repeats":
            count *= len(_values(value))
    for columns in exp.zip.values():
        count *= len(next(iter(columns.values()), []))
    return count


def _apply_variant(doc: YamlDocument, name: str) -> None:
    """Rewrite ``doc.data`` with variant ``name`` applied (validated first)."""
    data = doc.data
    variants = data.get("variants") or {}
    if isinstance(variants, dict):
        for key in variants:  # ``1:`` or ``true:`` is a number or a boolean to YAML, not a name
            if not isinstance(key, str):
                raise doc.error(("variants", str(key)), f"expected a variant name (text), got {key!r} (quote it)")
    if not isinstance(variants, dict) or name not in variants:
        known = ", ".join(variants) if isinstance(variants, dict) and variants else "none"
        raise doc.error(("variants",), f"no variant {name!r} (variants: {known})")
    try:
        variant = Variant.model_validate(variants[name])
    except ValidationError as exc:
        first = exc.errors()[0]
        loc, key_note = data_loc(variants[name], tuple(first["loc"]), first["type"])
        raise doc.error(("variants", name) + loc, key_note or _pydantic_message(first)) from None
    experiments = data.get("experiments")
    if not isinstance(experiments, list):
        return  # the normal validation reports it
    # A name is matched against the variant's (a set lookup): a list or mapping as a name would
    # end in "unhashable type", a number would silently match nothing. Every name is text first.
    for index, exp in enumerate(experiments):
        if isinstance(exp, dict) and "name" in exp and not isinstance(exp["name"], str):
            raise doc.error(("experiments", index, "name"),
                            f"expected an experiment name (text), got {exp['name']!r}")
    names = {e.get("name") for e in experiments if isinstance(e, dict) and isinstance(e.get("name"), str)}
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
        own = variant.experiments.get(exp["name"], {}) if isinstance(exp.get("name"), str) else {}
        for key, value in own.items():
            if key == "grid" and isinstance(value, dict) and isinstance(exp.get("grid"), dict):
                exp["grid"].update(value)
            else:
                exp[key] = value
    if not isinstance(data.get("name"), str):  # "3-tiny" or "['a']-tiny" would hide what was written
        raise doc.error(("name",) if "name" in data else (), f"expected the sweep's name (text), "
                        f"got {data.get('name')!r}" if "name" in data else "no 'name' at the top level")
    data["name"] = f"{data['name']}-{name}"


# Checks that a site a sweep names exists (``orchestrator.sites.profiles.load_site`` with the
# command's --sites-dir): raises UserError for an unknown one.
SiteCheck = Callable[[str], object]


def parse_sweep(path: Path | str, text: str | None = None, variant: str | None = None,
                max_runs: int = DEFAULT_MAX_RUNS, check_site: SiteCheck | None = None) -> LoadedSweep:
    """Load and validate a sweep file; every problem is a SourceError (file:line: field: what),
    and every problem found is reported at once (SourceErrors), not only the first.

    With ``variant`` the named overrides are applied first and the sweep is named
    ``<name>-<variant>``, so its results never mix with the full-size ones. A sweep that
    would expand to more than ``max_runs`` runs is refused before anything is expanded.
    ``check_site``: each site the experiments name is looked up, an unknown one reported with
    the other errors, where the sweep names it."""
    if text is None:
        text = read_source(path)  # read once: what is parsed is what is stored
    doc = load_yaml(path, text)
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping with 'name' and 'experiments' at the top level")
    if variant is not None:
        _apply_variant(doc, variant)
    errors: list[SourceError] = []
    try:
        sweep: Sweep | None = Sweep.model_validate(doc.data)
        assert sweep is not None
        experiments = list(enumerate(sweep.experiments))
    except ValidationError as exc:
        sweep = None
        errors += _validation_errors(doc, doc.data, (), exc)
        experiments = _valid_experiments(doc)
    names: set[str] = set()
    checked_sites: set[str] = set()
    for index, exp in experiments:
        if exp.name in names:
            errors.append(doc.error(("experiments", index, "name"), f"experiment name {exp.name!r} is used twice"))
        names.add(exp.name)
        errors += _check_experiment(doc, index, exp)
        if check_site is not None:
            errors += _check_sites(doc, index, exp, check_site, checked_sites)
        errors += _unmatched_overrides(doc, ("experiments", index), exp.site_overrides, exp.sites, "this experiment")
    if sweep is not None and check_site is not None:
        errors += _unknown_override_sites(doc, sweep.site_overrides, check_site)
    raise_all(errors)
    assert sweep is not None
    counts = [count_runs(exp) for exp in sweep.experiments]
    if sum(counts) > max_runs:
        index = max(range(len(counts)), key=counts.__getitem__)
        raise doc.error(("experiments", index), f"the sweep expands to {sum(counts):,} runs ({counts[index]:,} in "
                                                f"this experiment), over the limit of {max_runs:,} "
                                                "(--max-runs raises it)")
    return LoadedSweep(sweep=sweep, path=str(path), text=text)


def _validation_errors(doc: YamlDocument, data: Any, prefix: Loc, exc: ValidationError) -> list[SourceError]:
    """Each validation error located in the file; one per location (a union's members each
    report the same value: the first says it)."""
    out: dict[Loc, SourceError] = {}
    for error in exc.errors():
        loc, key_note = data_loc(data, tuple(error["loc"]), error["type"])
        out.setdefault(prefix + loc, doc.error(prefix + loc, key_note or _pydantic_message(error, data)))
    return list(out.values())


def _valid_experiments(doc: YamlDocument) -> list[tuple[int, Experiment]]:
    """The experiments that validate on their own, by index (their grids are checked further
    while another part of the file has errors)."""
    experiments = doc.data.get("experiments") if isinstance(doc.data, dict) else None
    out: list[tuple[int, Experiment]] = []
    for index, raw in enumerate(experiments if isinstance(experiments, list) else []):
        try:
            out.append((index, Experiment.model_validate(raw)))
            continue
        except ValidationError as exc:  # already reported by the sweep's validation
            bad = {error["loc"][0] for error in exc.errors() if error["loc"]}
        # Without its bad fields (an unknown one, a bad walltime), the rest of it is checked too.
        required = {name for name, info in Experiment.model_fields.items() if info.is_required()}
        if not isinstance(raw, dict) or bad & required:
            continue
        try:
            out.append((index, Experiment.model_validate({k: v for k, v in raw.items() if k not in bad})))
        except ValidationError:
            continue
    return out


def _unmatched_overrides(doc: YamlDocument, at: Loc, overrides: dict[str, Any], sites: list[str],
                         whose: str) -> list[SourceError]:
    """An error for each ``site_overrides`` target that no run's site matches: it would change
    nothing, silently (issue 53). ``site`` matches its every system; ``site:system`` that system
    or an experiment naming the whole site."""
    named = set(sites) | {target.partition(":")[0] for target in sites}
    return [doc.error(at + ("site_overrides", target),
                      f"site_overrides names {target!r}, which is not a site of {whose} "
                      f"({', '.join(sorted(set(sites)))}): it would change nothing")
            for target in overrides if target not in named and target.partition(":")[0] not in set(sites)]


def _unknown_override_sites(doc: YamlDocument, overrides: dict[str, Any], check_site: SiteCheck) -> list[SourceError]:
    """An error for each of the sweep's ``site_overrides`` targets that names no site profile (a
    misspelt one changed nothing, silently: issue 53). A site no experiment runs on is allowed
    here: a variant may narrow the sites, the overrides stay the sweep's."""
    errors: list[SourceError] = []
    for target in overrides:
        try:
            check_site(target)
        except SourceError:  # the profile exists, and its own error is reported where it is
            continue
        except UserError as exc:
            errors.append(doc.error(("site_overrides", target), f"site_overrides names no site: {exc}"))
    return errors


def _check_sites(doc: YamlDocument, index: int, exp: Experiment, check_site: SiteCheck,
                 checked: set[str]) -> list[SourceError]:
    """An error for each site of ``exp`` ``check_site`` refuses, where the sweep names it (each
    site once in the whole sweep)."""
    errors: list[SourceError] = []
    for position, target in enumerate(exp.sites):
        if target in checked:
            continue
        checked.add(target)
        try:
            check_site(target)
        except SourceError as exc:  # the profile's own file and line
            errors.append(exc)
        except UserError as exc:
            errors.append(doc.error(("experiments", index, "sites", position), str(exc)))
    return errors


def site_line(loaded: LoadedSweep, target: str) -> tuple[int | None, str | None]:
    """Where the sweep first names ``target`` (``site`` or ``site:system``): its line and field,
    for an error about the site itself (unknown, unreadable) that a profile cannot locate."""
    doc = load_yaml(loaded.path, loaded.text)
    experiments = doc.data.get("experiments") if isinstance(doc.data, dict) else None
    for index, exp in enumerate(experiments if isinstance(experiments, list) else []):
        sites = exp.get("sites") if isinstance(exp, dict) else None
        for position, value in enumerate(sites if isinstance(sites, list) else [sites]):
            if isinstance(value, str) and (value == target or value.split(":")[0] == target.split(":")[0]):
                loc: Loc = ("experiments", index, "sites", position) if isinstance(sites, list) else \
                    ("experiments", index, "sites")
                return doc.line_of(loc), format_loc(loc)
    return None, None
