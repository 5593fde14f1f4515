"""Stage 4: the batch script of a run, rendered from the site's Jinja template.

Every value printed by ``{{ ... }}`` is shell-quoted unless code marked it as
already safe (:class:`ShellSafe`). Templates mark scheduler directive values with
``| directive``, which refuses anything but plain characters (a newline there
would start a new shell line). Undefined names are errors (StrictUndefined).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from pathlib import Path
from typing import Any

import jinja2

from orchestrator import paths
from orchestrator.errors import UserError
from orchestrator.plan.resolve import AFFINITY_WRAPPER, Placement, Resolved, asks_whole_nodes
from orchestrator.plan.runfiles import RunFiles, job_name  # noqa: F401  (re-exported)
from orchestrator.sites.profiles import PythonActivation, SiteProfile
from orchestrator.timefmt import format_hms


class ShellSafe(str):
    """Text that is already valid, quoted shell (made by code, never by a user)."""


class RenderError(UserError):
    pass


_DIRECTIVE_OK = re.compile(r"^[A-Za-z0-9_.:,=/@%+\-\[\]]*$")


# A plan quotes and checks the same words over and over (flags, paths, precisions, queues):
# each distinct text once.
@functools.lru_cache(maxsize=1 << 16)
def _quoted(text: str) -> ShellSafe:
    return ShellSafe(shlex.quote(text))


def shell_quote(value: Any) -> ShellSafe:
    if isinstance(value, ShellSafe):
        return value
    return _quoted(str(value))


def _shell_join(words: list[str]) -> ShellSafe:
    """``shlex.join(words)``."""
    return ShellSafe(" ".join(map(_quoted, words)))


def directive(value: Any) -> ShellSafe:
    """A scheduler directive value: plain characters only, so it can never break out of its line."""
    return _directive(str(value))


@functools.lru_cache(maxsize=1 << 16)
def _directive(text: str) -> ShellSafe:
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


@functools.lru_cache(maxsize=256)  # the same for every run of a site
def python_env_lines(activation: PythonActivation | None) -> tuple[ShellSafe, ...]:
    """The lines that give the program its Python: the module lines (re-quoted word by word),
    then ``source <venv>/bin/activate``, or conda's shell hook and ``conda activate <env>``.
    Every value is quoted; the hook's ``$(...)`` is the only shell code, and it is ours."""
    if activation is None:
        return ()
    lines = [ShellSafe(shlex.join(words)) for words in activation.modules]
    if activation.kind == "venv" and activation.prefix is not None:
        activate = os.path.join(activation.prefix.rstrip("/") or "/", "bin/activate")
        lines.append(ShellSafe(f"source {shlex.quote(activate)}"))
    elif activation.kind == "conda":
        # A batch job's shell has not run the lines `conda init` writes into ~/.bashrc: without the
        # hook, `conda activate` fails ("Run 'conda init' before 'conda activate'").
        lines.append(ShellSafe(f'eval "$({shlex.quote(activation.conda)} shell.bash hook)"'))
        lines.append(ShellSafe("conda activate" + (f" {shlex.quote(activation.prefix)}" if activation.prefix else "")))
    return tuple(lines)


def env_prepend_lines(site: SiteProfile) -> list[ShellSafe]:
    """``export NAME=<dirs>"${NAME:+:$NAME}"`` for each of the profile's ``env_prepend``: the
    directories first, then what the modules put there (names are checked when the profile loads)."""
    return [ShellSafe(f'export {name}={shlex.quote(":".join(dirs))}"${{{name}:+:${name}}}"')
            for name, dirs in site.env_prepend.items()]


def _finalize(value: Any) -> Any:
    if value is None:
        raise RenderError("template printed an empty value (None)")
    return shell_quote(value)


def environment(template_dirs: list[Path] | None = None) -> jinja2.Environment:
    loader = jinja2.FileSystemLoader([str(p) for p in (template_dirs or [])] + [str(paths.templates_dir())])
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, finalize=_finalize,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False, auto_reload=False)  # a plan's templates do not change under it
    env.filters["q"] = shell_quote
    env.filters["directive"] = directive
    env.filters["hms"] = format_hms
    return env


# The variable that limits a process to some devices, by device type.
_AFFINITY_VARS = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK", "hpu": "HABANA_VISIBLE_MODULES"}


# The template's context: the site's values, the placement's, and the run's own.

def _site_part(site: SiteProfile) -> dict[str, Any]:
    res = site.resources
    return {
        "site": {"name": site.name, "system": site.system or "", "scheduler": site.scheduler},
        # Accelerator and CPU requests (see orchestrator.sites.profiles.Resources)
        "gpu_request": res.gpu_request,
        "gres_name": res.gres_name,
        "cpus_per_device": res.cpus_per_device or "",
        "mem": res.mem or "",
        "mem_per_device": res.mem_per_device or "",
        "exclusive": res.exclusive,
        "constraint": res.constraint or "",
        "select": res.select or "",
        "place": res.place or "",
        "filesystems": res.filesystems or "",
        # Launch helpers the templates write (see orchestrator.sites.launchers)
        "gpu_affinity": site.launcher.gpu_affinity,
        "affinity_wrapper": AFFINITY_WRAPPER,
        "affinity_var": _AFFINITY_VARS.get(site.device.type, "CUDA_VISIBLE_DEVICES"),
        "node_devices": site.device.per_node,
        "directives": [directive(d) for d in site.directives],
        "setup": [shell_line(line) for line in site.setup],
        "env_prepend": env_prepend_lines(site),
        "env": dict(site.env),
        "workloads_root": str(paths.workloads_root()),
    }


def _shape_part(placement: Placement, site: SiteProfile, share: bool = False) -> dict[str, Any]:
    """The values a template may branch on (``{% if queue %}``) besides the site's."""
    cpus_per_task = None
    devices_per_node = placement.devices_per_node or placement.tasks_per_node
    if site.resources.cpus_per_device:
        cpus_per_task = site.resources.cpus_per_device * max(1, devices_per_node // max(1, placement.tasks_per_node))
    return {
        # A run on part of an accelerator node asks for the whole node unless it may share it
        # (orchestrator/plan/resolve.py asks_whole_nodes, which the charged devices follow too).
        "whole_node": asks_whole_nodes(placement, site, share),
        "queue": placement.queue or "",
        "queue_tier": placement.queue_tier or "",
        "account": placement.account or "",
        "qos": placement.qos or "",
        "cpus_per_task": cpus_per_task or "",
        "rendezvous": placement.rendezvous,
        "hostfile": placement.hostfile,
        "launcher": placement.launcher,
        # The Python environment, as this plan read it from the user's environment (a prefix the
        # user gives is the same for every run of the site: a tuple, so it can be part of a shape).
        "python_env": python_env_lines(placement.python_env),
    }


def _queue_directives(placement: Placement, site: SiteProfile) -> list[ShellSafe]:
    return [directive(d) for q in site.queues
            if q.name == placement.queue and (q.tier or None) == placement.queue_tier for d in q.directives]


def _run_part(resolved: Resolved, files: RunFiles) -> dict[str, Any]:
    placement, site, spec = resolved.placement, resolved.site, resolved.spec
    assert placement is not None
    run_dir = str(files.run_dir)
    devices_per_node = placement.devices_per_node or placement.tasks_per_node
    cards_per_node = -(-devices_per_node // site.device.per_card)
    return {
        "run": {"id": spec.id, "sweep": spec.sweep, "experiment": spec.experiment,
                "workload": spec.workload, "devices": spec.devices, "precision": spec.precision},
        "job_name": job_name(spec.id),
        "nodes": placement.nodes,
        "tasks_per_node": placement.tasks_per_node,
        "devices_per_node": devices_per_node,
        "walltime_s": placement.walltime_s,
        "walltime": format_hms(placement.walltime_s),
        "cards_per_node": cards_per_node,
        "cards_total": cards_per_node * placement.nodes,
        "pre_commands": [_shell_join(step) for step in placement.pre_steps],
        "run_dir": run_dir,
        "metrics_path": os.path.join(run_dir, "metrics.json"),  # str(files.metrics), without pathlib's cost
        "stdout": os.path.join(run_dir, "stdout.log"),
        "stderr": os.path.join(run_dir, "stderr.log"),
        "command": _shell_join(placement.argv),
    }


def render_script(resolved: Resolved, files: RunFiles, env: jinja2.Environment | None = None) -> str:
    """The batch script text of a resolved (not skipped) run."""
    return ScriptRenderer(env).render(resolved, files)


class ScriptRenderer:
    """Renders the scripts of many runs: Jinja keeps each template compiled, and each site's
    part of the context (its setup lines re-quoted, its directives checked) is made once."""

    def __init__(self, env: jinja2.Environment | None = None) -> None:
        self.env = env or environment()
        self._site_parts: dict[int, tuple[SiteProfile, dict[str, Any]]] = {}

    def _site_part(self, site: SiteProfile) -> dict[str, Any]:
        found = self._site_parts.get(id(site))
        if found is None or found[0] is not site:  # the profile itself is kept, so its id is not reused
            found = self._site_parts[id(site)] = (site, _site_part(site))
        return found[1]

    def render(self, resolved: Resolved, files: RunFiles) -> str:
        placement = resolved.placement
        if placement is None:
            raise ValueError("cannot render a skipped run")
        site = resolved.site
        context = {**_run_part(resolved, files), **_shape_part(placement, site, resolved.spec.share),
                   "queue_directives": _queue_directives(placement, site), **self._site_part(site)}
        try:
            return self.env.get_template(site.template_name).render(context)
        except jinja2.TemplateNotFound as exc:
            raise RenderError(f"site {site.name}: template {exc.name!r} not found") from None
        except jinja2.UndefinedError as exc:
            raise RenderError(f"site {site.name}: template {site.template_name}: {exc.message}") from None
