"""Stage 4: the batch script of a run, rendered from the site's Jinja template.

Every value printed by ``{{ ... }}`` is shell-quoted unless code marked it as
already safe (:class:`ShellSafe`). Templates mark scheduler directive values with
``| directive``, which refuses anything but plain characters (a newline there
would start a new shell line). Undefined names are errors (StrictUndefined).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import jinja2

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.resolve import AFFINITY_WRAPPER, Resolved
from orchestrator.runfiles import RunFiles, job_name  # noqa: F401  (re-exported)
from orchestrator.timefmt import format_hms


class ShellSafe(str):
    """Text that is already valid, quoted shell (made by code, never by a user)."""


class RenderError(UserError):
    pass


_DIRECTIVE_OK = re.compile(r"^[A-Za-z0-9_.:,=/@%+\-\[\]]*$")


def shell_quote(value: Any) -> ShellSafe:
    if isinstance(value, ShellSafe):
        return value
    return ShellSafe(shlex.quote(str(value)))


def directive(value: Any) -> ShellSafe:
    """A scheduler directive value: plain characters only, so it can never break out of its line."""
    text = str(value)
    if not _DIRECTIVE_OK.fullmatch(text):  # fullmatch: `$` alone lets a trailing newline through
        raise RenderError(f"value {text!r} cannot go in a scheduler directive "
                          "(allowed: letters, digits and _ . : , = / @ % + - [ ])")
    return ShellSafe(text)


def shell_line(command: str) -> ShellSafe:
    """A profile's setup command, re-quoted word by word: ``module load x`` stays as it is,
    ``$(...)`` or ``;`` in it become literal text."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise RenderError(f"setup line {command!r}: {exc}") from None
    return ShellSafe(shlex.join(words))


def _finalize(value: Any) -> Any:
    if value is None:
        raise RenderError("template printed an empty value (None)")
    return shell_quote(value)


def environment(template_dirs: list[Path] | None = None) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader([str(p) for p in (template_dirs or [])] + [str(paths.templates_dir())])
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, finalize=_finalize,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False)
    env.filters["q"] = shell_quote
    env.filters["directive"] = directive
    env.filters["hms"] = format_hms
    return env


# The variable that limits a process to some devices, by device type.
_AFFINITY_VARS = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK", "hpu": "HABANA_VISIBLE_MODULES"}


def render_script(resolved: Resolved, files: RunFiles, env: jinja2.Environment | None = None) -> str:
    """The batch script text of a resolved (not skipped) run."""
    placement = resolved.placement
    if placement is None:
        raise ValueError("cannot render a skipped run")
    site, spec = resolved.site, resolved.spec
    env = env or environment()
    res = site.resources
    devices_per_node = placement.devices_per_node or placement.tasks_per_node
    cards_per_node = -(-devices_per_node // site.device.per_card)
    cpus_per_task = None
    if res.cpus_per_device:
        cpus_per_task = res.cpus_per_device * max(1, devices_per_node // max(1, placement.tasks_per_node))
    context = {
        "run": {"id": spec.id, "sweep": spec.sweep, "experiment": spec.experiment,
                "workload": spec.workload, "devices": spec.devices, "precision": spec.precision},
        "site": {"name": site.name, "system": site.system or "", "scheduler": site.scheduler},
        "job_name": job_name(spec.id),
        "nodes": placement.nodes,
        "tasks_per_node": placement.tasks_per_node,
        "devices_per_node": devices_per_node,
        "queue": placement.queue or "",
        "queue_tier": placement.queue_tier or "",
        "account": placement.account or "",
        "qos": placement.qos or "",
        "walltime_s": placement.walltime_s,
        "walltime": format_hms(placement.walltime_s),
        # Accelerator and CPU requests (see orchestrator.sites.Resources)
        "gpu_request": res.gpu_request,
        "gres_name": res.gres_name,
        "cards_per_node": cards_per_node,
        "cards_total": cards_per_node * placement.nodes,
        "cpus_per_device": res.cpus_per_device or "",
        "cpus_per_task": cpus_per_task or "",
        "mem": res.mem or "",
        "mem_per_device": res.mem_per_device or "",
        "exclusive": res.exclusive,
        "constraint": res.constraint or "",
        "select": res.select or "",
        "place": res.place or "",
        "filesystems": res.filesystems or "",
        # Launch helpers the templates write (see orchestrator.launchers)
        "gpu_affinity": site.launcher.gpu_affinity,
        "affinity_wrapper": AFFINITY_WRAPPER,
        "affinity_var": _AFFINITY_VARS.get(site.device.type, "CUDA_VISIBLE_DEVICES"),
        "node_devices": site.device.per_node,
        "rendezvous": placement.rendezvous,
        "hostfile": placement.hostfile,
        "launcher": placement.launcher,
        "pre_commands": [ShellSafe(shlex.join(step)) for step in placement.pre_steps],
        "directives": [directive(d) for d in site.directives],
        "queue_directives": [directive(d) for q in site.queues
                             if q.name == placement.queue and (q.tier or None) == placement.queue_tier
                             for d in q.directives],
        "setup": [shell_line(line) for line in site.setup],
        "env": dict(site.env),
        "run_dir": str(files.run_dir),
        "metrics_path": str(files.metrics),
        "stdout": str(files.stdout),
        "stderr": str(files.stderr),
        "workloads_root": str(paths.workloads_root()),
        "command": ShellSafe(shlex.join(placement.argv)),
    }
    try:
        return env.get_template(site.template_name).render(context)
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"site {site.name}: template {exc.name!r} not found") from None
    except jinja2.UndefinedError as exc:
        raise RenderError(f"site {site.name}: template {site.template_name}: {exc.message}") from None
