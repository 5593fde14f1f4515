"""Stage 3: a run placed on a site, or kept as skipped with the reason.

Pure: the site profile, the run spec and the user's environment in; a placement
(nodes, tasks per node, queue, walltime, launcher argv) or a reason out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from orchestrator.expand import RunSpec
from orchestrator.launchers import LaunchRequest, get_launcher
from orchestrator.sites import Queue, SiteProfile
from workloads import registry


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


def _pick_queue(site: SiteProfile, nodes: int, devices: int, walltime_s: int) -> tuple[Queue | None, str | None]:
    fitting = [q for q in site.queues if q.min_nodes <= nodes <= q.max_nodes
               and devices >= q.min_devices and (q.max_devices is None or devices <= q.max_devices)]
    if not fitting:
        limits = "; ".join(f"{q.name}: {q.min_nodes}-{q.max_nodes} nodes" for q in site.queues)
        return None, f"no queue takes {nodes} node(s) / {devices} device(s) ({limits})"
    for queue in fitting:
        if walltime_s <= queue.max_walltime_s:
            return queue, None
    longest = max(q.max_walltime_s for q in fitting)
    return None, f"walltime {walltime_s}s exceeds the longest queue that fits ({longest}s)"


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
            metrics_path: str = "metrics.json") -> Resolved:
    def skip(reason: str) -> Resolved:
        return Resolved(spec, site, None, reason)

    device = site.device
    if spec.precision not in device.precisions:
        return skip(f"precision {spec.precision} not supported by {device.model} "
                    f"(supported: {', '.join(device.precisions)})")
    if device.counts == "power_of_two" and spec.devices & (spec.devices - 1):
        return skip(f"{device.model} device counts must be powers of two, got {spec.devices}")
    capacity = device.per_node * site.max_nodes
    if spec.devices > capacity:
        return skip(f"{spec.devices} devices requested, {site.name} has at most {capacity} "
                    f"({site.max_nodes} node(s) x {device.per_node})")
    nodes = math.ceil(spec.devices / device.per_node)
    if nodes > 1 and spec.devices % device.per_node:
        return skip(f"{spec.devices} devices do not fill whole nodes of {device.per_node}")
    tasks_per_node = spec.devices if nodes == 1 else device.per_node
    reason = _memory_reason(spec, site)
    if reason:
        return skip(reason)
    queue, reason = _pick_queue(site, nodes, spec.devices, spec.walltime_s)
    if queue is None:
        return skip(reason or "no queue")
    account = env.get(site.account.env) or None
    if site.account.required and not account:
        return skip(f"site {site.name} needs an account: set ${site.account.env}")
    try:
        launcher = get_launcher(site.launcher.name)
    except KeyError as exc:
        return skip(str(exc.args[0]))
    workload = registry.get(spec.workload)
    request = LaunchRequest(python=python, module=workload.module,
                            args=workload_args(spec, site, metrics_path), nodes=nodes,
                            tasks_per_node=tasks_per_node, extra_args=list(site.launcher.args))
    reason = launcher.check(request)
    if reason:
        return skip(reason)
    placement = Placement(
        nodes=nodes, tasks_per_node=tasks_per_node, queue=queue.name, walltime_s=spec.walltime_s,
        account=account, qos=queue.qos or env.get(site.account.qos_env) or None,
        launcher=launcher.name, argv=launcher.argv(request), peak_tflops=site.peak(spec.precision),
    )
    return Resolved(spec, site, placement)
