"""Stage 3: a run placed on a site, or kept as skipped with the reason.

Pure: the site profile, the run spec and the user's environment in; a placement
(nodes, tasks per node, queue, walltime, launcher argv) or a reason out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from orchestrator import paths
from orchestrator.expand import RunSpec
from orchestrator.launchers import LaunchRequest, get_launcher
from orchestrator.sites import Queue, SiteProfile
from orchestrator.timefmt import format_hms
from orchestrator.vendors.base import runner_for, spec_values
from workloads import registry

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

    @property
    def skipped(self) -> bool:
        return self.placement is None


def workload_args(spec: RunSpec, site: SiteProfile, metrics_path: str) -> list[str]:
    """The workload's command-line arguments for this run (values are quoted later)."""
    workload = registry.get(spec.workload)
    args = ["--precision", spec.precision, "--device", site.device.type]
    for axis in ("strategy", "batch_size", "seq_len"):
        value = getattr(spec, axis)
        if value is not None:
            args += ["--" + axis.replace("_", "-"), str(value)]
    for name, value in spec.params:
        param = workload.param(name)
        flag = param.flag if param else "--" + name.replace("_", "-")
        args += [flag, ("true" if value else "false") if isinstance(value, bool) else str(value)]
    peak = site.peak(spec.precision)
    if peak is not None:
        args += ["--peak-tflops", repr(float(peak))]
    args += ["--output", metrics_path]
    return args


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
    return None, (f"walltime {walltime_s}s exceeds the longest queue that fits {nodes} node(s) "
                  f"({longest.label}: {format_hms(longest.max_walltime_s)}{hint})")


def _memory_reason(spec: RunSpec, site: SiteProfile) -> str | None:
    workload = registry.get(spec.workload)
    if workload.memory_bytes is None or site.device.memory_gb is None:
        return None
    values: dict[str, Any] = {**workload.defaults(), **spec.param_dict, "precision": spec.precision,
                              "devices": spec.devices, "strategy": spec.strategy,
                              "batch_size": spec.batch_size, "seq_len": spec.seq_len}
    need_gb = workload.memory_bytes(values) / 1e9
    if need_gb > site.device.memory_gb:
        return (f"predicted to need {need_gb:.1f} GB per device, "
                f"{site.device.model} has {site.device.memory_gb:g} GB")
    return None


def resolve(spec: RunSpec, site: SiteProfile, env: Mapping[str, str], python: str,
            metrics_path: str = "metrics.json", queue: str | None = None) -> Resolved:
    """Place ``spec`` on ``site`` or say why it cannot run there.

    ``queue`` (or a ``queue`` attribute of the spec) asks for a queue by name instead of
    letting the site's limits choose one.
    """
    def skip(reason: str) -> Resolved:
        return Resolved(spec, site, None, reason)

    where = f"{site.name}:{site.system}" if site.system else site.name
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
    vendor = runner_for(site.launcher.name)
    if vendor is not None:
        # The vendor's own tool runs the model (orchestrator/vendors/): its documented
        # applications decide what can run and how, not orch's PyTorch memory model.
        reason = vendor.supports(spec.workload, spec.precision, spec_values(spec))
    else:
        reason = _memory_reason(spec, site) if spec.check_memory else None
    if reason:
        return skip(reason)
    chosen, reason = _pick_queue(site, nodes, spec.devices, spec.walltime_s,
                                 queue or getattr(spec, "queue", None))
    if chosen is None:
        return skip(reason or "no queue")
    account = site.account.account(env)
    if site.account.required and not account:
        names = " or $".join(n for n in (site.account.env, site.account.fallback_env) if n)
        return skip(f"site {site.name} needs an account/project: set ${names}")
    qos = chosen.qos or site.account.qos(env)
    if site.account.qos_required and not qos:
        names = " or $".join(n for n in (site.account.qos_env, site.account.qos_fallback_env) if n)
        return skip(f"site {site.name} needs a QoS: set ${names}")
    try:
        launcher = get_launcher(site.launcher.name)
    except KeyError as exc:
        return skip(str(exc.args[0]))
    tasks_per_node = 1 if launcher.single_process else devices_per_node
    workload = registry.get(spec.workload)
    wrapper = ["bash", AFFINITY_WRAPPER] if site.launcher.gpu_affinity != "none" else []
    script = str(paths.workloads_root() / (workload.module.replace(".", "/") + ".py"))
    request = LaunchRequest(python=python, module=workload.module,
                            args=workload_args(spec, site, metrics_path), nodes=nodes,
                            tasks_per_node=tasks_per_node, extra_args=list(site.launcher.args),
                            scheduler=site.scheduler, devices_per_node=devices_per_node,
                            rank_wrapper=wrapper, options=dict(site.launcher.options), script=script,
                            workload=spec.workload)
    reason = launcher.check(request)
    if reason:
        return skip(reason)
    placement = Placement(
        nodes=nodes, tasks_per_node=tasks_per_node, queue=None if chosen.implicit else chosen.name, walltime_s=spec.walltime_s,
        account=account, qos=qos, launcher=launcher.name, argv=launcher.argv(request),
        peak_tflops=site.peak(spec.precision), queue_tier=chosen.tier, devices_per_node=devices_per_node,
        pre_steps=launcher.pre_steps(request), rendezvous=launcher.rendezvous(request),
        hostfile=launcher.hostfile(request),
    )
    return Resolved(spec, site, placement)
