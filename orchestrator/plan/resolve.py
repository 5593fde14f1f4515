"""Stage 3: a run placed on a site, or kept as skipped with the reason.

Pure: the site profile, the run spec and the user's environment in; a placement
(nodes, tasks per node, queue, walltime, launcher argv) or a reason out.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.plan.expand import RunSpec
from orchestrator.predict import memory as _memory
from orchestrator.predict import run_memory
from orchestrator.predict.formulas import formula_for
from orchestrator.sites.launchers import Launcher, LaunchRequest, get_launcher
from orchestrator.sites.profiles import PythonActivation, Queue, SiteProfile, expand_references
from orchestrator.sites.vendors.base import VendorRunner, spec_values
from orchestrator.timefmt import format_duration, format_hms
from workloads import registry
from workloads.registry import Workload

if TYPE_CHECKING:
    from orchestrator.predict.perfmodel.machine import Machine
    from orchestrator.predict.perfmodel.runmodel import RunModel

# ``walltime: auto`` (orchestrator/plan/sweep.py) reaches the resolver as this walltime_s; the
# placement gets the prediction x AUTO_MARGIN + AUTO_STARTUP_S (see auto_walltime).
AUTO_WALLTIME = 0
AUTO_MARGIN = 1.5
AUTO_STARTUP_S = 300

# The per-rank wrapper the templates write when a profile asks for GPU affinity
# (relative to the run directory, the ranks' working directory).
AFFINITY_WRAPPER = "orch-gpu-affinity.sh"


@dataclass(frozen=True)
class Placement:
    nodes: int
    tasks_per_node: int
    queue: str | None
    walltime_s: int
    account: str | None
    qos: str | None
    launcher: str
    argv: list[str] = field(hash=False)
    peak_tflops: float | None = None
    queue_tier: str | None = None  # the routed tier of ``queue`` (Polaris prod: small, medium, large)
    devices_per_node: int | None = None  # devices on each node (tasks_per_node unless one process drives them)
    pre_steps: list[list[str]] = field(default_factory=list, hash=False)  # commands before argv
    rendezvous: bool = False  # the script exports MASTER_ADDR / PET_RDZV_* for the launcher
    hostfile: bool = False  # the script writes orch-hostfile for the launcher
    # The site's python_env as this plan applies it (modules, then the venv or conda environment
    # activated before the program starts); None: the profile's kind none.
    python_env: PythonActivation | None = None

    @property
    def queue_label(self) -> str | None:
        if self.queue is None:
            return None
        return f"{self.queue} ({self.queue_tier})" if self.queue_tier else self.queue


@dataclass(frozen=True)
class Resolved:
    spec: RunSpec
    site: SiteProfile
    placement: Placement | None
    skip_reason: str | None = None
    # Per-device peak of tensor memory predicted for the run (GB, without the device's fixed cost).
    predicted_peak_gb: float | None = None
    # Seconds of one step and of the whole run (warm-up + timed steps) from the time model
    # (orchestrator/predict/perfmodel/); None where it does not apply to the workload.
    predicted_step_s: float | None = None
    predicted_run_s: float | None = None
    # What predicted_peak_gb came from: orchestrator/predict/memory.py FROM_TRACE ("trace"), FROM_TRACE_AND_MODEL
    # ("trace+model", DeepSpeed) or FROM_FORMULA ("formula", where tracing cannot go).
    memory_from: str | None = None

    @property
    def skipped(self) -> bool:
        return self.placement is None


def workload_args(spec: RunSpec, site: SiteProfile, metrics_path: str) -> list[str]:
    """The workload's command-line arguments for this run (values are quoted later)."""
    return _workload_args(spec, registry.get(spec.workload), site.device.type, site.peak(spec.precision),
                          metrics_path, {}, site.device.bandwidth_gbs)


def _workload_args(spec: RunSpec, workload: Workload, device_type: str, peak: float | None, metrics_path: str,
                   flags: dict[tuple[str, str], str], bandwidth_gbs: float | None = None) -> list[str]:
    """:func:`workload_args` with the site's facts looked up already; ``flags`` caches each
    parameter's command-line flag by (workload, parameter). A workload that reports MBU gets the
    device's peak bandwidth from the profile, unless the sweep sets it."""
    args = ["--precision", spec.precision, "--device", device_type]
    if spec.strategy is not None:
        args += ["--strategy", str(spec.strategy)]
    if spec.batch_size is not None:
        args += ["--batch-size", str(spec.batch_size)]
    if spec.seq_len is not None:
        args += ["--seq-len", str(spec.seq_len)]
    for name, value in spec.params:
        flag = flags.get((workload.name, name))
        if flag is None:
            param = workload.param(name)
            flag = flags[(workload.name, name)] = param.flag if param else "--" + name.replace("_", "-")
        args += [flag, ("true" if value else "false") if isinstance(value, bool) else str(value)]
    if peak is not None:
        args += ["--peak-tflops", repr(float(peak))]
    if (bandwidth_gbs is not None and workload.param("peak_bandwidth_gbs") is not None
            and all(name != "peak_bandwidth_gbs" for name, _ in spec.params)):
        args += ["--peak-bandwidth-gbs", repr(float(bandwidth_gbs))]
    args += ["--output", metrics_path]
    return args


def _with_devices_param(args: list[str], spec: RunSpec, workload: Workload) -> list[str]:
    """``args`` with the run's device count as ``workload.devices_param`` (a one-process workload's
    tensor-parallel size), before ``--output``; unchanged where the sweep sets that parameter."""
    name = workload.devices_param
    if name is None or any(key == name for key, _ in spec.params):
        return args
    param = workload.param(name)
    flag = param.flag if param else "--" + name.replace("_", "-")
    cut = len(args) - 2 if args[-2:-1] == ["--output"] else len(args)
    return [*args[:cut], flag, str(spec.devices), *args[cut:]]


def auto_walltime(run_s: float) -> int:
    """``walltime: auto``: the predicted run time x AUTO_MARGIN plus AUTO_STARTUP_S (Python and
    torch start-up, data, the first step's compile and allocation, which the step model leaves
    out), rounded up to whole minutes."""
    return int(math.ceil((run_s * AUTO_MARGIN + AUTO_STARTUP_S) / 60.0) * 60)


def over_walltime(run_s: float | None, walltime_s: int) -> str | None:
    """Why a run predicted to take ``run_s`` seconds does not fit its walltime, both figures in
    (None when it fits, or when there is no prediction)."""
    if run_s is None or run_s <= walltime_s:
        return None
    predicted, limit = format_duration(run_s), format_duration(walltime_s)
    if predicted == limit:  # e.g. 3601 s against 3600 s: show the seconds that differ
        predicted, limit = format_hms(math.ceil(run_s)), format_hms(walltime_s)
    return f"predicted {predicted} > walltime {limit}"


def _fits(q: Queue, nodes: int, devices: int) -> bool:
    return (q.min_nodes <= nodes <= q.max_nodes and devices >= q.min_devices
            and (q.max_devices is None or devices <= q.max_devices))


def _over_limits(q: Queue, nodes: int, devices: int, walltime_s: int) -> str | None:
    """Why queue entry ``q`` refuses the run (None when it takes it)."""
    if nodes > q.max_nodes:
        return f"{nodes} node(s) over the limit of {q.max_nodes}"
    if nodes < q.min_nodes:
        return f"{nodes} node(s) under the minimum of {q.min_nodes}"
    if q.max_devices is not None and devices > q.max_devices:
        return f"{devices} device(s) over the limit of {q.max_devices}"
    if devices < q.min_devices:
        return f"{devices} device(s) under the minimum of {q.min_devices}"
    if walltime_s > q.max_walltime_s:
        return f"walltime {format_hms(walltime_s)} over the limit of {format_hms(q.max_walltime_s)}"
    return None


def _pick_queue(site: SiteProfile, nodes: int, devices: int, walltime_s: int,
                requested: str | None = None) -> tuple[Queue | None, str | None]:
    """The queue entry for a run: the one asked for by name, or the site's choice.

    The site's choice: among queues chosen automatically (``auto``), the first in the
    profile whose preferred node range (``prefer_nodes``, default its limits) holds the
    run and whose limits take it; failing that, the first whose limits take it.
    """
    if requested:
        entries = site.queues_named(requested)
        if not entries:
            known = ", ".join(dict.fromkeys(q.name for q in site.queues))
            return None, f"site {site.name} has no queue {requested!r} (queues: {known})"
        for queue in entries:
            if _over_limits(queue, nodes, devices, walltime_s) is None:
                return queue, None
        why = "; ".join(f"{q.label} ({q.limits_text().split(': ', 1)[1]}): "
                        f"{_over_limits(q, nodes, devices, walltime_s)}" for q in entries)
        return None, f"queue {requested} cannot take {nodes} node(s) / {devices} device(s) / " \
                     f"{format_hms(walltime_s)}: {why}"
    auto = [q for q in site.queues if q.auto]
    fitting = [q for q in auto if _fits(q, nodes, devices)]
    if not fitting:
        limits = "; ".join(q.limits_text() for q in auto)
        manual = [q.label for q in site.queues if not q.auto and _fits(q, nodes, devices)]
        hint = f" (by name only: {', '.join(manual)})" if manual else ""
        return None, f"no queue takes {nodes} node(s) / {devices} device(s) ({limits}){hint}"
    for queue in [q for q in fitting if q.prefers(nodes)] + fitting:
        if walltime_s <= queue.max_walltime_s:
            return queue, None
    longest = max(fitting, key=lambda q: q.max_walltime_s)
    manual = [q.label for q in site.queues if not q.auto and _over_limits(q, nodes, devices, walltime_s) is None]
    hint = f"; by name only: {', '.join(manual)}" if manual else ""
    return None, (f"walltime {format_hms(walltime_s)} exceeds the longest queue that fits {nodes} node(s) "
                  f"({longest.label}: {format_hms(longest.max_walltime_s)}{hint})")


def _run_values(spec: RunSpec, workload: Workload) -> dict[str, Any]:
    """A run's values as the workload's plan-time models read them: defaults, parameters, axes."""
    return {**workload.defaults(), **spec.param_dict, "precision": spec.precision, "devices": spec.devices,
            "strategy": spec.strategy, "batch_size": spec.batch_size, "seq_len": spec.seq_len}


def shape_key(spec: RunSpec) -> tuple[Any, ...] | None:
    """What a plan-time prediction of a run depends on, as a cache key; None where a value cannot
    be one (a list). The values' types are part of it: 1 == 1.0 == True as dictionary keys."""
    key = (spec.workload, spec.params, tuple([type(v) for _, v in spec.params]), spec.precision,
           spec.devices, spec.strategy, spec.batch_size, spec.seq_len)
    try:
        hash(key)
    except TypeError:
        return None
    return key


MemoryNeed = tuple[float | None, str | None]  # GB per device, and what it came from (memory.FROM_*)


def _memory_need_gb(spec: RunSpec, workload: Workload) -> MemoryNeed:
    """Predicted GB per device of the run and its source (None, None: the workload has no memory model)."""
    values = _run_values(spec, workload)
    # The one memory model (orchestrator/predict/run_memory.py, also `orch predict`'s): traced from the
    # workload's program where it can be (orchestrator/predict/memory_trace.py), else the formula.
    try:
        found = run_memory.run_bytes(spec.workload, values)
        if found is None:
            return None, None
        return found[0] / 1e9, found[1]
    except OverflowError:  # sizes past any float: past any device too
        return float("inf"), _memory.FROM_FORMULA
    except ValueError:  # a value the model cannot read (e.g. allreduce sizes "`id`"): no prediction
        return None, None


def _version(text: str) -> tuple[int, ...]:
    """``2.1.2``, ``2.6.0+cu124`` -> (2, 1, 2), (2, 6, 0): the release numbers only."""
    numbers = re.match(r"[0-9]+(?:\.[0-9]+)*", text)
    return tuple(int(part) for part in numbers.group(0).split(".")) if numbers else ()


def torch_too_old(strategy: str | None, site: SiteProfile) -> str | None:
    """Why the torch a profile declares (``python_env.torch``) cannot run ``strategy``, or None
    (no need declared, or no torch declared: the probe finds out)."""
    need = registry.STRATEGY_NEEDS_TORCH.get(strategy or "")
    declared = site.python_env.torch
    if need is None or declared is None or _version(declared) >= _version(need[0]):
        return None
    return (f"strategy {strategy} needs torch >= {need[0]} ({need[1]}); {site.name}'s python_env loads torch "
            f"{declared}: give a newer PyTorch with the sweep's site_overrides {{{site.name}: {{python_env: "
            "{kind: venv, prefix: /path/to/venv}}} or another module line")


def _queue_takes_whole_nodes(placement: Placement, site: SiteProfile) -> bool:
    caps = [q.max_devices for q in site.queues_named(placement.queue or "") if q.max_devices]
    return not caps or min(caps) >= site.device.per_node


def asks_whole_nodes(placement: Placement, site: SiteProfile, share: bool) -> bool:
    """Whether a run on part of an accelerator node asks its scheduler for the whole node, so no
    other job runs beside what it measures (cores, memory bandwidth, links); not when the sweep
    says `share: true`, nor where the profile sizes its cores to its devices (cpus_per_device:
    the script asks for a share of the node), nor where the queue itself is for partial nodes
    (JADE2's `small`: one GPU a job, nodes shared by design: a whole-node request would wait for
    ever). CPU "devices" are tasks, one core each already (the sandbox, the local site's ledger)."""
    devices_per_node = placement.devices_per_node or placement.tasks_per_node
    return (not share and site.device.is_accelerator and devices_per_node < site.device.per_node
            and not site.resources.cpus_per_device and _queue_takes_whole_nodes(placement, site))


def charged_devices(resolved: Resolved) -> int | None:
    """The devices a centre charges a run for (issue 27: one definition for the plan and the
    ``cost`` view): a run whose script holds its nodes whole (a whole-node request, or a profile
    whose every job is exclusive) is charged every device of its nodes; a run whose script asks
    for a share of a node (issue 53: Baskerville's `--cpus-per-gpu`, a `share: true` sweep, a
    partial-node queue) and CPU processes are charged for the devices they hold. None for a run
    with no placement."""
    placement, site = resolved.placement, resolved.site
    if placement is None:
        return None
    res = site.resources
    exclusive_profile = res.exclusive or "excl" in (res.place or "")
    whole = asks_whole_nodes(placement, site, resolved.spec.share) or (site.device.is_accelerator
                                                                         and exclusive_profile)
    return placement.nodes * site.device.per_node if whole else resolved.spec.devices


def host_memory_gb() -> float | None:
    """This machine's physical memory (MemTotal), or None where /proc/meminfo cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except (OSError, ValueError, IndexError):
        return None
    return None


def _over_host_memory(need_gb: float, source: str, processes: int) -> str | None:
    """On this machine (a local site's CPU "devices"), the run's processes share the host's memory:
    a run sized past it was launched, swapped, then killed by the kernel after minutes (issue 27)."""
    host = host_memory_gb()
    if host is None or need_gb * processes <= host:
        return None
    return (f"predicted to need {need_gb * processes:.1f} GB of host memory ({processes} process(es) x "
            f"{need_gb:.1f} GB tensors by {source}), this machine has {host:.1f} GB")


def _on_host(site: SiteProfile) -> bool:
    """A local site's CPU devices without a stated memory: its processes share this machine's."""
    return site.device.memory_gb is None and site.device.type == "cpu" and site.scheduler == "local"


def _memory_shown(need_gb: float, site: SiteProfile, processes: int) -> float | None:
    """The figure :func:`_over_memory` compares with what there is (None: nothing to compare with):
    the processes' tensors against the host's memory, or one device's tensors plus its fixed cost."""
    if _on_host(site):
        return need_gb * processes
    if site.device.memory_gb is None:
        return None
    return need_gb + (site.device.fixed_memory_gb or 0.0)


def _memory_room(site: SiteProfile) -> float | None:
    """What :func:`_memory_shown` may reach: the host's memory, or the device's."""
    return host_memory_gb() if _on_host(site) else site.device.memory_gb


# Predictions a memory skip may ask for to say what would fit instead (each cached; a new traced
# shape costs a second or so): batch 1 and an affine guess from it, checked; then a sharded strategy.
FIT_EVALUATIONS = 5
SHARDED = ("fsdp-full", "zero3")  # a workload's most sharded strategy: the first of these it has


class _FitSearch:
    """Candidate runs' predictions against what the site has, at most FIT_EVALUATIONS of them."""

    def __init__(self, predict: Callable[[RunSpec], float | None], site: SiteProfile, processes: int) -> None:
        self.predict, self.site, self.processes = predict, site, processes
        self.left = FIT_EVALUATIONS

    def shown(self, candidate: RunSpec) -> float | None:
        """The candidate's figure (as the skip reason's) where it fits; None where it does not, has
        no prediction, or the budget is spent."""
        if self.left <= 0:
            return None
        self.left -= 1
        gb = self.predict(candidate)
        figure = None if gb is None else _memory_shown(gb, self.site, self.processes)  # per device off the host
        room = _memory_room(self.site)
        return figure if figure is not None and room is not None and figure <= room else None


def _smaller_batch(spec: RunSpec, workload: Workload, need_gb: float, search: _FitSearch) -> str | None:
    """The largest micro-batch (batch_size) that fits: batch 1, then the batch an affine fit of
    batch 1 and the run's own predicts, checked, and bisected down while the budget lasts."""
    batch = spec.batch_size or int(workload.axis_defaults.get("batch_size") or 1)
    if "batch_size" not in workload.axes or batch <= 1:
        return None
    at_one = search.shown(replace(spec, batch_size=1))
    if at_one is None:
        return None
    low, low_shown, high = 1, at_one, batch  # low fits, high does not
    over = _memory_shown(need_gb, search.site, search.processes)
    room = _memory_room(search.site)
    slope = (over - at_one) / (batch - 1) if over is not None and math.isfinite(over) else 0.0
    guess = 1 + int((room - at_one) / slope) if room is not None and slope > 0 else (low + high) // 2
    while high - low > 1 and search.left > 0:
        guess = min(max(guess, low + 1), high - 1)
        figure = search.shown(replace(spec, batch_size=guess))
        if figure is None:
            high, guess = guess, (low + guess) // 2
        else:
            low, low_shown, guess = guess, figure, guess + 1  # a good guess: one above it settles it
    settled = f", {high} does not" if high == low + 1 and high < batch else ""
    return f"batch_size {low} fits ({low_shown:.1f} GB){settled}"


def _sharded(spec: RunSpec, workload: Workload, search: _FitSearch) -> str | None:
    """A sharded strategy that fits: on the run's devices, else on a whole node of them."""
    sharded = next((name for name in SHARDED if name in workload.strategies), None)
    if "strategy" not in workload.axes or sharded is None:
        return None
    per_node = search.site.device.per_node
    candidates: list[tuple[RunSpec, str]] = []
    if spec.strategy not in SHARDED and spec.devices > 1:
        candidates.append((replace(spec, strategy=sharded), f"strategy {sharded} on {spec.devices} devices"))
    if per_node > spec.devices and not _on_host(search.site):
        strategy = spec.strategy if spec.strategy in SHARDED else sharded
        candidates.append((replace(spec, strategy=strategy, devices=per_node),
                           f"strategy {strategy} on {per_node} devices (a whole node)"))
    for candidate, what in candidates:
        figure = search.shown(candidate)
        if figure is not None:
            return f"{what} fits ({figure:.1f} GB per device)"
    return None


def _over_memory(need: MemoryNeed, site: SiteProfile, processes: int = 1) -> str | None:
    """Why the predicted tensors plus the device's fixed cost (site profile) do not fit, or None.
    CPU devices of a local site without a stated memory share this machine's memory."""
    need_gb, source = need
    if need_gb is not None and source is not None and _on_host(site):
        return _over_host_memory(need_gb, source, processes)
    fixed = site.device.fixed_memory_gb or 0.0
    if need_gb is not None and site.device.memory_gb is not None and need_gb + fixed > site.device.memory_gb:
        tensors = f"{need_gb:.1f} GB tensors by {source}"
        detail = f" ({tensors} + {fixed:g} GB fixed)" if fixed else f" ({tensors})"
        return (f"predicted to need {need_gb + fixed:.1f} GB per device{detail}, "
                f"{site.device.model} has {site.device.memory_gb:g} GB")
    return None


def resolve(spec: RunSpec, site: SiteProfile, env: Mapping[str, str], python: str,
            metrics_path: str = "metrics.json", queue: str | None = None) -> Resolved:
    """Place ``spec`` on ``site`` or say why it cannot run there.

    ``queue`` (or a ``queue`` attribute of the spec) asks for a queue by name instead of
    letting the site's limits choose one.
    """
    return SiteResolver(site, env, python).resolve(spec, metrics_path, queue)


# The memory a run is predicted to need depends on the workload and the run's values, not
# on the site: one prediction serves every site of a plan. Key: (workload, the spec's values).
MemoryCache = dict[tuple[Any, ...], MemoryNeed]


def _once(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...] | None, compute: Callable[[], Any]) -> Any:
    """``compute()``, once per shape ``key`` in ``cache`` (every time where the key is None)."""
    if key is None:
        return compute()
    if key in cache:
        return cache[key]
    value = cache[key] = compute()
    return value


# What depends on a run's values alone, not on the site, once per shape per process: a workload's
# refusal, and the run as the time model sees it (its step time is the site's).
_REFUSALS: dict[tuple[Any, ...], str | None] = {}
_RUN_MODELS: dict[tuple[Any, ...], tuple[RunModel | None, dict[str, Any]]] = {}


def _run_model(spec: RunSpec, workload: Workload) -> tuple[RunModel | None, dict[str, Any]]:
    """The time model's view of the run (None where it has none) and the run's values."""
    from orchestrator.predict.perfmodel.runmodel import run_model

    values = {**workload.defaults(), **spec.param_dict}
    return run_model(spec.workload, values, devices=spec.devices, precision=spec.precision,
                     strategy=spec.strategy, batch_size=spec.batch_size, seq_len=spec.seq_len), values


class SiteResolver:
    """:func:`resolve` for many runs on one site: what is the same for every run (the account
    and QoS from the environment, the launcher, the workloads' paths, the queue chosen for a
    shape, a workload's memory prediction, the Python environment) is worked out once, not per run.

    A run whose sweep overrides the site (``site_overrides``: setup, env, python_env) is resolved
    by a resolver of the overridden profile, one per distinct set of overrides."""

    def __init__(self, site: SiteProfile, env: Mapping[str, str], python: str,
                 memory: MemoryCache | None = None) -> None:
        self.profile = site  # as loaded; ``site`` below has the launcher's references read
        # ``${NAME}`` in the launcher's options is read from the plan's environment (the user's
        # clone of a vendor's code under $HOME): the runs' profile carries the values, so what
        # renders the script and what checks the plan see the paths the job will use.
        options, self._options_missing = expand_references(dict(site.launcher.options), env)
        if options != site.launcher.options and not self._options_missing:
            site = site.model_copy(update={"launcher": site.launcher.model_copy(update={"options": options})})
        self.site, self.env, self.python = site, env, python
        self.where = f"{site.name}:{site.system}" if site.system else site.name
        self._python_env: tuple[PythonActivation | None, str | None] | None = None  # (activation, or why none)
        self._overridden: dict[str, SiteResolver] = {}  # by the sweep's site_overrides, as canonical JSON
        self.overrides_applied = False  # True: this resolver's profile has a sweep's overrides applied
        self._memory = {} if memory is None else memory
        self._queues: dict[tuple[int, int, int, str | None], tuple[Queue | None, str | None]] = {}
        self._account: tuple[str | None, str | None] | None = None  # (account, QoS from the environment)
        self._launcher: Launcher | str | None = None  # the launcher, or why there is none
        self._flags: dict[tuple[str, str], str] = {}
        self._scripts: dict[str, str] = {}
        self._extra_args = list(site.launcher.args)
        self._options = dict(options)
        self._wrapper = ["bash", AFFINITY_WRAPPER] if site.launcher.gpu_affinity != "none" else []
        self._times: dict[tuple[Any, ...], tuple[float | None, float | None]] = {}
        self._machine: Machine | bool | None = None  # False: the site has none the model can use
        self._fits: dict[tuple[Any, ...], str] = {}  # by shape: what would fit instead (memory skips)

    def _pick_queue(self, nodes: int, devices: int, walltime_s: int,
                    requested: str | None) -> tuple[Queue | None, str | None]:
        key = (nodes, devices, walltime_s, requested)
        found = self._queues.get(key)
        if found is None:
            found = self._queues[key] = _pick_queue(self.site, nodes, devices, walltime_s, requested)
        return found

    def _refusal(self, spec: RunSpec, workload: Workload, key: tuple[Any, ...] | None) -> str | None:
        """Why the workload's program would refuse this run at start (registry ``refusal``)."""
        refusal = workload.refusal
        if refusal is None:
            return None
        return _once(_REFUSALS, key, lambda: refusal(_run_values(spec, workload)))

    def _memory_need(self, spec: RunSpec, workload: Workload, key: tuple[Any, ...] | None) -> MemoryNeed:
        """Predicted GB of tensors per device and its source, once per distinct run shape (every site shares it)."""
        if formula_for(spec.workload) is None:
            return None, None
        return _once(self._memory, key, lambda: _memory_need_gb(spec, workload))

    def _what_fits(self, spec: RunSpec, workload: Workload, key: tuple[Any, ...] | None, need_gb: float,
                   processes: int) -> str:
        """What would fit instead of a run predicted not to (issue 27), from the same predictions:
        the largest micro-batch, else a sharded strategy; "nothing smaller fits" where neither
        does. Once per shape, from at most FIT_EVALUATIONS predictions."""
        found = self._fits.get(key) if key is not None else None
        if found is None:
            search = _FitSearch(lambda candidate: self._memory_need(candidate, workload, shape_key(candidate))[0],
                                self.site, processes)
            found = (_smaller_batch(spec, workload, need_gb, search) or _sharded(spec, workload, search)
                     or "nothing smaller fits (no smaller micro-batch nor a sharded strategy)")
            if key is not None:
                self._fits[key] = found
        return found

    def traced_memory_inputs(self, spec: RunSpec) -> "_memory.Inputs | None":
        """What the run's traced memory prediction depends on, where resolving it here would ask for
        one (not on a vendor's site, nor for a run its program refuses); None otherwise."""
        workload = registry.get(spec.workload)
        if formula_for(spec.workload) is None or isinstance(self._get_launcher(), VendorRunner):
            return None
        if self._refusal(spec, workload, shape_key(spec)):
            return None
        try:
            return _memory.traced_inputs(spec.workload, _run_values(spec, workload))
        except (ValueError, OverflowError):  # values the model cannot read: resolving the run says so
            return None

    def _time_need(self, spec: RunSpec, workload: Workload,
                   key: tuple[Any, ...] | None) -> tuple[float | None, float | None]:
        """Predicted (step, run) seconds on this site, once per distinct run shape."""
        from orchestrator.predict.perfmodel.runmodel import MODELLED

        if spec.workload not in MODELLED:
            return None, None
        return _once(self._times, key, lambda: self._predict_time(spec, workload, key))

    def _predict_time(self, spec: RunSpec, workload: Workload,
                      key: tuple[Any, ...] | None) -> tuple[float | None, float | None]:
        from orchestrator.predict.perfmodel.runmodel import run_seconds

        model, values = _once(_RUN_MODELS, key, lambda: _run_model(spec, workload))
        machine = self._get_machine() if model is not None else None
        if model is None or machine is None:
            return None, None
        try:
            step = model.step_s(machine)
            return step, run_seconds(step, values)
        except (ValueError, ZeroDivisionError, OverflowError):
            return None, None

    def _get_machine(self) -> "Machine | None":
        """The site's machine for the time model, with fitted efficiency factors where calibrated."""
        if self._machine is None:
            from orchestrator.predict.perfmodel.calibration import efficiency_for
            from orchestrator.predict.perfmodel.machine import machine_from_site

            try:
                machine = machine_from_site(self.site)
            except ValueError:  # no peak for this device: no time prediction
                self._machine = False
                return None
            fitted = efficiency_for(machine)
            self._machine = machine.with_efficiency(fitted) if fitted else machine
        return None if isinstance(self._machine, bool) else self._machine

    def _get_launcher(self) -> Launcher | str:
        if self._launcher is None:
            try:
                self._launcher = get_launcher(self.site.launcher.name)
            except KeyError as exc:
                self._launcher = str(exc.args[0])
        return self._launcher

    def _script(self, workload: Workload) -> str:
        script = self._scripts.get(workload.module)
        if script is None:
            script = self._scripts[workload.module] = str(
                paths.workloads_root() / (workload.module.replace(".", "/") + ".py"))
        return script

    def with_overrides(self, overrides: Mapping[str, Any]) -> "SiteResolver":
        """The resolver of this site as a sweep's ``site_overrides`` change it (made once per
        distinct overrides; the memory predictions are shared)."""
        key = json.dumps(overrides, sort_keys=True)
        found = self._overridden.get(key)
        if found is None:
            try:
                site = self.profile.with_overrides(overrides)
            except ValueError as exc:
                raise UserError(f"site_overrides for {self.where}: {exc}") from None
            found = self._overridden[key] = SiteResolver(site, self.env, self.python, self._memory)
            found.overrides_applied = True
        return found

    def _python_activation(self) -> tuple[PythonActivation | None, str | None]:
        """The site's python_env as this plan applies it, or why no run can start (once per site)."""
        if self._python_env is None:
            self._python_env = self.site.python_env.activation(self.env, self.site.profile_label)
        return self._python_env

    def _account_and_qos(self) -> tuple[str | None, str | None]:
        if self._account is None:
            self._account = (self.site.account.account(self.env), self.site.account.qos(self.env))
        return self._account

    def site_refusal(self) -> str | None:
        """Why no run of this site can be planned in this environment, whatever its values: a
        missing account, QoS (where no queue brings one), Python environment or launcher path: one
        reason for every run of the site, so the plan says it once. Checked before any memory trace,
        so a plan that lacks $ORCH_ACCOUNT says so at once, not after seconds of tracing."""
        site = self.site
        account, _ = self._account_and_qos()
        if site.account.required and not account:
            names = " or $".join(n for n in (site.account.env, site.account.fallback_env) if n)
            return f"site {site.name} needs an account/project: set ${names}"
        _, reason = self._python_activation()
        if reason:  # like a missing account: the user's environment decides, the run waits for it
            return f"site {site.name} needs its Python environment: {reason}"
        if self._options_missing:  # a path under $HOME, a clone the user names
            names = ", ".join(f"${name}" for name in self._options_missing)
            return f"site {site.name} needs {names}: set it (read by {site.profile_label} launcher.options)"
        _, env_qos = self._account_and_qos()
        if site.account.qos_required and not env_qos and not any(q.qos for q in site.queues):
            return self._qos_missing()  # no queue brings its own: every run needs it, said once for the site
        return None

    def _qos_missing(self) -> str:
        account = self.site.account
        names = " or $".join(n for n in (account.qos_env, account.qos_fallback_env) if n)
        return f"site {self.site.name} needs a QoS: set ${names}"

    def queue_refusal(self, spec: RunSpec, queue: str | None = None) -> str | None:
        """Why no queue of the site takes the run (its node count, devices or walltime past every
        queue's limits), or no QoS comes with the one that does: known from the profile alone, so
        said before any memory trace. A run with ``walltime: auto`` is checked here on its node
        count only (its walltime needs the time model); None for a run refused for other reasons."""
        per_node = self.site.device.per_node
        nodes = math.ceil(spec.devices / per_node)
        if spec.devices > per_node * self.site.max_nodes or (nodes > 1 and spec.devices % per_node):
            return None  # refused on its device count, by resolve
        requested = queue or getattr(spec, "queue", None)
        auto = spec.walltime_s == AUTO_WALLTIME
        if auto and requested:
            return None  # a named queue's refusal names the walltime: after the time model
        chosen, reason = self._pick_queue(nodes, spec.devices, 0 if auto else spec.walltime_s, requested)
        if chosen is None:
            return reason or "no queue"
        _, env_qos = self._account_and_qos()
        if not auto and self.site.account.qos_required and not (chosen.qos or env_qos):
            return self._qos_missing()
        return None

    def resolve(self, spec: RunSpec, metrics_path: str = "metrics.json", queue: str | None = None) -> Resolved:
        """Place ``spec`` on the site or say why it cannot run there (see :func:`resolve`)."""
        overrides = getattr(spec, "site_overrides", None)
        if overrides and not self.overrides_applied:
            return self.with_overrides(overrides).resolve(spec, metrics_path, queue)
        site = self.site

        predicted: MemoryNeed = (None, None)  # GB of tensors per device and source, once known
        key = shape_key(spec)  # the predictions' cache key

        def skip(reason: str, memory: bool = True) -> Resolved:
            need = predicted
            if memory and need[0] is None and not isinstance(self._get_launcher(), VendorRunner):
                need = self._memory_need(spec, registry.get(spec.workload), key)  # shown for every run (cached)
            return Resolved(spec, site, None, reason, need[0], memory_from=need[1])

        where = self.where
        device = site.device
        if spec.precision not in device.precisions:
            return skip(f"precision {spec.precision} not supported by {device.model} on {where} "
                        f"(supported: {', '.join(device.precisions)})")
        if device.counts == "power_of_two" and spec.devices & (spec.devices - 1):
            return skip(f"{device.model} device counts must be powers of two, got {spec.devices}")
        capacity = device.per_node * site.max_nodes
        if spec.devices > capacity:
            return skip(f"{spec.devices} devices requested, {where} has at most {capacity} "
                        f"({site.max_nodes} node(s) x {device.per_node})")
        nodes = math.ceil(spec.devices / device.per_node)
        if nodes > 1 and spec.devices % device.per_node:
            return skip(f"{spec.devices} devices do not fill whole nodes of {device.per_node}")
        devices_per_node = spec.devices if nodes == 1 else device.per_node
        refused_here = self.site_refusal() or self.queue_refusal(spec, queue)
        if refused_here:  # the environment or the queues' limits decide: before any trace
            return skip(refused_here, memory=False)
        workload = registry.get(spec.workload)
        vendor = self._get_launcher()
        if isinstance(vendor, VendorRunner):
            # The vendor's own tool runs the model (orchestrator/sites/vendors/): its documented
            # applications decide what can run and how, not orch's PyTorch memory model.
            reason = vendor.supports(spec.workload, spec.precision, spec_values(spec))
        else:
            refused = self._refusal(spec, workload, key)
            if refused:  # the program would refuse it at start: no job, and nothing to trace
                return skip(f"{spec.workload} refuses these values: {refused}", memory=False)
            too_old = torch_too_old(spec.strategy, site)
            if too_old:  # the job's PyTorch lacks what the strategy calls: it could only fail at start
                return skip(too_old, memory=False)
            predicted = self._memory_need(spec, workload, key)
            reason = _over_memory(predicted, site, devices_per_node) if spec.check_memory else None
            if reason and predicted[0] is not None:
                reason += "; " + self._what_fits(spec, workload, key, predicted[0], devices_per_node)
        if reason:
            return skip(reason)
        step_s, run_s = (None, None) if isinstance(vendor, VendorRunner) else self._time_need(spec, workload, key)
        walltime_s = spec.walltime_s
        if walltime_s == AUTO_WALLTIME:
            if run_s is None:
                return skip(f"walltime: auto needs a predicted run time; the time model has none for "
                            f"{spec.workload} here (give the experiment a walltime)")
            walltime_s = auto_walltime(run_s)
        elif spec.over_walltime == "skip":
            longer = over_walltime(run_s, walltime_s)
            if longer:  # the sweep asked for no job that is predicted to time out; keep the prediction shown
                return replace(skip(f"{longer}; raise walltime: or set over_walltime: warn"),
                               predicted_step_s=step_s, predicted_run_s=run_s)
        chosen, reason = self._pick_queue(nodes, spec.devices, walltime_s,
                                          queue or getattr(spec, "queue", None))
        if chosen is None:
            return skip(reason or "no queue")
        account, env_qos = self._account_and_qos()
        qos = chosen.qos or env_qos
        if site.account.qos_required and not qos:
            return skip(self._qos_missing())
        activation, _ = self._python_activation()
        launcher = self._get_launcher()
        if isinstance(launcher, str):
            return skip(launcher)
        one_process = workload.devices_param is not None and not isinstance(launcher, VendorRunner)
        if one_process:
            if nodes > 1:
                return skip(f"{spec.workload} drives all its devices from one process on one node; "
                            f"{spec.devices} devices need {nodes} nodes of {device.per_node}", memory=False)
            # Started once, on the allocation's node with all its devices: the site's per-rank
            # launcher (srun, mpiexec, deepspeed) would start one copy per device, or pin it to one.
            launcher = get_launcher("single")
        tasks_per_node = 1 if launcher.single_process else devices_per_node
        peak = site.peak(spec.precision)
        args = _workload_args(spec, workload, device.type, peak, metrics_path, self._flags, device.bandwidth_gbs)
        request = LaunchRequest(python=self.python, module=workload.module,
                                args=_with_devices_param(args, spec, workload) if one_process else args,
                                nodes=nodes, tasks_per_node=tasks_per_node,
                                extra_args=[] if one_process else list(self._extra_args),
                                scheduler=site.scheduler, devices_per_node=devices_per_node,
                                rank_wrapper=[] if one_process else list(self._wrapper),
                                options={} if one_process else dict(self._options),
                                script=self._script(workload), workload=spec.workload)
        reason = launcher.check(request)
        if reason:
            return skip(reason)
        placement = Placement(
            nodes=nodes, tasks_per_node=tasks_per_node, queue=None if chosen.implicit else chosen.name,
            walltime_s=walltime_s, account=account, qos=qos, launcher=launcher.name,
            argv=launcher.argv(request), peak_tflops=peak, queue_tier=chosen.tier,
            devices_per_node=devices_per_node, pre_steps=launcher.pre_steps(request),
            rendezvous=launcher.rendezvous(request), hostfile=launcher.hostfile(request),
            python_env=activation,
        )
        return Resolved(spec, site, placement, predicted_peak_gb=predicted[0], predicted_step_s=step_s,
                        predicted_run_s=run_s, memory_from=predicted[1])
