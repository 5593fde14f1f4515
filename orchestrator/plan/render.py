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
from orchestrator.plan.resolve import AFFINITY_WRAPPER, Placement, Resolved, asks_whole_nodes
from orchestrator.plan.runfiles import RunFiles, job_name  # noqa: F401  (re-exported)
from orchestrator.sites.profiles import PythonActivation, SiteProfile
from orchestrator.timefmt import format_hms


class ShellSafe(str):
    """Text that is already valid, quoted shell (made by code, never by a user)."""


class RenderError(UserError):
    pass


_DIRECTIVE_OK = re.compile(r"^[A-Za-z0-9_.:,=/@%+\-\[\]]*$")


def shell_quote(value: Any) -> ShellSafe:
    if isinstance(value, ShellSafe):
        return value
    if type(value) is _Slot:
        return value._emit("q")
    return ShellSafe(shlex.quote(str(value)))


def directive(value: Any) -> ShellSafe:
    """A scheduler directive value: plain characters only, so it can never break out of its line."""
    if type(value) is _Slot:
        return value._emit("d")
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


def python_env_lines(activation: PythonActivation | None) -> tuple[ShellSafe, ...]:
    """The lines that give the program its Python: the module lines (re-quoted word by word),
    then ``source <venv>/bin/activate``, or conda's shell hook and ``conda activate <env>``.
    Every value is quoted; the hook's ``$(...)`` is the only shell code, and it is ours."""
    if activation is None:
        return ()
    lines = [ShellSafe(shlex.join(words)) for words in activation.modules]
    if activation.kind == "venv" and activation.prefix is not None:
        lines.append(ShellSafe(f"source {shlex.quote(_child(activation.prefix.rstrip('/') or '/', 'bin/activate'))}"))
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
    if type(value) is _Slot:
        return value._emit("f")
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


# The template's context in three parts, by how often each changes: the site's (the same
# for every run on it), the shape's (queue, account, per-task CPUs, rendezvous: the same for
# many runs) and the run's own. render_script joins them; ScriptRenderer renders the first
# two once per shape and fills in the third per run.

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


def _child(directory: str, name: str) -> str:
    """``str(Path(directory) / name)`` without building paths."""
    return directory + name if directory.endswith("/") else directory + "/" + name


def _run_part(resolved: Resolved, run_dir: str) -> dict[str, Any]:
    placement, site, spec = resolved.placement, resolved.site, resolved.spec
    assert placement is not None
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
        "pre_commands": [ShellSafe(_join(step)) for step in placement.pre_steps],
        "run_dir": run_dir,
        "metrics_path": _child(run_dir, "metrics.json"),
        "stdout": _child(run_dir, "stdout.log"),
        "stderr": _child(run_dir, "stderr.log"),
        "command": ShellSafe(_join(placement.argv)),
    }


# shlex.quote of the words and values plans repeat over and over (flags, paths, precisions).
_QUOTED: dict[str, str] = {}


def _quote(text: str) -> str:
    quoted = _QUOTED.get(text)
    if quoted is None:
        if len(_QUOTED) > 100_000:
            _QUOTED.clear()
        quoted = _QUOTED[text] = shlex.quote(text)
    return quoted


def _join(words: list[str]) -> str:
    """``shlex.join(words)``."""
    try:
        return " ".join(map(_QUOTED.__getitem__, words))
    except KeyError:
        return " ".join([_quote(word) for word in words])


def render_script(resolved: Resolved, files: RunFiles, env: jinja2.Environment | None = None) -> str:
    """The batch script text of a resolved (not skipped) run."""
    placement = resolved.placement
    if placement is None:
        raise ValueError("cannot render a skipped run")
    site = resolved.site
    env = env or environment()
    context = {**_run_part(resolved, str(files.run_dir)),
               **_shape_part(placement, site, resolved.spec.share),
               "queue_directives": _queue_directives(placement, site), **_site_part(site)}
    try:
        return env.get_template(site.template_name).render(context)
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"site {site.name}: template {exc.name!r} not found") from None
    except jinja2.UndefinedError as exc:
        raise RenderError(f"site {site.name}: template {site.template_name}: {exc.message}") from None


# ---------------------------------------------------------------- many runs at once
#
# A plan renders thousands of scripts from a handful of templates, and runs of one shape
# (site, queue, account, rendezvous, ...) differ only in their own values: ids, paths, the
# command line. ScriptRenderer renders each shape once with a placeholder (_Slot) in place
# of every run value, and records what the template did to each one: printed it (shell-
# quoted), quoted it (``| q``) or made it a directive (``| directive``). A run's script is
# then the shape's text with each placeholder replaced by the run's value, quoted or checked
# exactly as the template would have done it.
#
# A template that does anything else with a run value (``{% if nodes > 1 %}``, ``| upper``,
# joining it to other text) is caught three ways: a placeholder refuses every operation but
# those three (the value then becomes part of the shape); the shape is rendered twice with
# placeholders of different spelling, one that needs shell quoting and one that does not,
# and the two texts must agree around them; and the first run of each shape is also rendered
# by Jinja and must come out the same. A shape that fails any check renders all its runs
# through Jinja (render_script), as before: slower, never different.


# A run value's name: its key in the run part, and its key or index inside that value
# when the value is a dict (``run.id``: ("run", "id")) or a list (("pre_commands", 0)).
_Name = tuple[str, Any]


def _value(part: dict[str, Any], name: _Name) -> Any:
    key, inner = name
    return part[key] if inner is None else part[key][inner]


class _SlotMisuse(Exception):
    """A template used a run value for something other than printing, quoting or a directive."""

    def __init__(self, name: _Name) -> None:
        super().__init__(name)
        self.name = name


class _Slot:
    """A run value's place in a shape's text; refuses every use but the renderer's filters."""

    __slots__ = ("_name", "_recorder")

    def __init__(self, name: _Name, recorder: "_Recorder") -> None:
        self._name = name
        self._recorder = recorder

    def _emit(self, op: str) -> ShellSafe:
        return self._recorder.token(self._name, op)

    def _misuse(self, *args: Any, **kwargs: Any) -> Any:
        raise _SlotMisuse(self._name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise _SlotMisuse(self._name)

    __str__ = __repr__ = __format__ = __bool__ = __len__ = __iter__ = __contains__ = __getitem__ = _misuse
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __call__ = _misuse  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _misuse
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __divmod__ = __rdivmod__ = __pow__ = __rpow__ = _misuse
    __neg__ = __pos__ = __abs__ = __int__ = __float__ = __index__ = __round__ = _misuse


class _Recorder:
    """Hands out the placeholders' tokens for one rendering of a shape, in one spelling."""

    def __init__(self, spelling: str) -> None:
        self.spelling = spelling
        self.ops: list[tuple[_Name, str]] = []

    def token(self, name: _Name, op: str) -> ShellSafe:
        self.ops.append((name, op))
        return ShellSafe(self.spelling % (len(self.ops) - 1))


# Two spellings of a token: the first needs shell quoting (NUL), the second does not.
_SPELLINGS = (("\x00%d\x01", re.compile("\x00([0-9]+)\x01"), ("\x00", "\x01")),
              ("@@orch%d@@", re.compile("@@orch([0-9]+)@@"), ("@@orch",)))


# What fill() does to a run value, by what the template did to its placeholder: exactly
# _finalize, shell_quote and directive, with the common cases (ints, words seen before) short.
def _finalize_value(value: Any) -> str:
    if value is None:
        raise RenderError("template printed an empty value (None)")
    return _quote_value(value)


def _quote_value(value: Any) -> str:
    if isinstance(value, ShellSafe):
        return value
    text = value if type(value) is str else str(value)
    return _QUOTED.get(text) or _quote(text)


_DIRECTIVES_SEEN: set[str] = set()  # directive values checked already (sweep, workload, walltime...)


def _directive_value(value: Any) -> str:
    if type(value) is int:
        return str(value)
    if type(value) is str and value in _DIRECTIVES_SEEN:
        return value
    checked = directive(value)
    if type(value) is str:
        if len(_DIRECTIVES_SEEN) > 100_000:
            _DIRECTIVES_SEEN.clear()
        _DIRECTIVES_SEEN.add(value)
    return checked


_OPS = {"f": _finalize_value, "q": _quote_value, "d": _directive_value}


def _slotted(part: dict[str, Any], recorder: _Recorder, fixed: dict[_Name, Any]) -> dict[str, Any]:
    """The run part with a placeholder for each value, but the ``fixed`` ones."""
    def slot(name: _Name) -> Any:
        return fixed[name] if name in fixed else _Slot(name, recorder)

    out: dict[str, Any] = {}
    for key, value in part.items():
        if type(value) is dict:
            out[key] = {inner: slot((key, inner)) for inner in value}
        elif type(value) is list:
            out[key] = [slot((key, index)) for index in range(len(value))]
        else:
            out[key] = slot((key, None))
    return out


class _Shape:
    """A shape's text with the places of the run values: fill() makes a run's script."""

    __slots__ = ("parts", "holes")

    def __init__(self, parts: list[str | None], holes: list[tuple[int, str, Any, Any]]) -> None:
        self.parts = parts
        self.holes = holes

    def fill(self, part: dict[str, Any]) -> str:
        parts = self.parts.copy()
        for position, key, inner, op in self.holes:
            parts[position] = op(part[key] if inner is None else part[key][inner])
        return "".join(parts)  # type: ignore[arg-type]


def _shape_text(template: jinja2.Template, context: dict[str, Any], part: dict[str, Any],
                fixed: dict[_Name, Any]) -> _Shape | None:
    """The shape, or None when the two spellings do not agree (the template did more than
    print, quote or check a run value)."""
    texts = []
    for spelling, pattern, markers in _SPELLINGS:
        recorder = _Recorder(spelling)
        text = template.render({**context, **_slotted(part, recorder, fixed)})
        pieces = pattern.split(text)
        literals = pieces[0::2]
        if any(marker in literal for literal in literals for marker in markers):
            return None
        texts.append((literals, [recorder.ops[int(i)] for i in pieces[1::2]]))
    (literals, ops), (other_literals, other_ops) = texts
    if literals != other_literals or ops != other_ops:
        return None
    parts: list[str | None] = []
    holes: list[tuple[int, str, Any, Any]] = []
    for index, literal in enumerate(literals):
        if literal:
            parts.append(literal)
        if index < len(ops):
            (key, inner), op = ops[index]
            holes.append((len(parts), key, inner, _OPS[op]))
            parts.append(None)
    return _Shape(parts, holes)


class _TemplateState:
    """Per template: the run values it branches on (made part of the shape), its shapes."""

    MAX_SHAPES = 512  # more distinct shapes than this: the template branches on per-run values

    def __init__(self) -> None:
        self.fixed: tuple[_Name, ...] = ()
        self.shapes = 0


_JINJA = object()  # a shape whose runs are rendered by Jinja


class ScriptRenderer:
    """Renders the scripts of many runs: each template and site once, each shape once,
    per run only the run's own values. The text is exactly render_script's."""

    def __init__(self, env: jinja2.Environment | None = None) -> None:
        self.env = env or environment()
        self._sites: dict[int, tuple[SiteProfile, jinja2.Template | None, dict[str, Any] | None]] = {}
        self._templates: dict[str, _TemplateState] = {}
        self._shapes: dict[tuple[Any, ...], _Shape | object] = {}
        self.jinja_renders = 0  # runs rendered by Jinja (a check, or a shape that needs it)

    def _site(self, site: SiteProfile) -> tuple[jinja2.Template | None, dict[str, Any] | None]:
        found = self._sites.get(id(site))
        if found is None or found[0] is not site:
            try:
                template: jinja2.Template | None = self.env.get_template(site.template_name)
                context: dict[str, Any] | None = _site_part(site)
            except Exception:  # render_script raises the error the user should see
                template, context = None, None
            found = self._sites[id(site)] = (site, template, context)
        return found[1], found[2]

    def _jinja(self, resolved: Resolved, run_dir: str) -> str:
        self.jinja_renders += 1
        return render_script(resolved, RunFiles(Path(run_dir)), self.env)

    def render(self, resolved: Resolved, run_dir: str) -> str:
        """``render_script(resolved, RunFiles(Path(run_dir)))``; ``run_dir`` is absolute."""
        placement, site = resolved.placement, resolved.site
        if placement is None:
            raise ValueError("cannot render a skipped run")
        template, site_context = self._site(site)
        if template is None or site_context is None:
            return self._jinja(resolved, run_dir)
        state = self._templates.get(site.template_name)
        if state is None:
            state = self._templates[site.template_name] = _TemplateState()
        shape_part = _shape_part(placement, site, resolved.spec.share)
        part = _run_part(resolved, run_dir)
        try:
            key = (id(site), tuple(shape_part.values()), len(placement.pre_steps),
                   tuple(_value(part, name) for name in state.fixed) if state.fixed else ())
            shape = self._shapes.get(key)
        except TypeError:  # a value that cannot be a key
            return self._jinja(resolved, run_dir)
        if shape is None:
            return self._new_shape(key, state, template, site_context, shape_part, part, resolved, run_dir)
        if shape is _JINJA:
            return self._jinja(resolved, run_dir)
        try:
            return shape.fill(part)  # type: ignore[attr-defined]  # a _Shape here: the sentinels are handled above
        except Exception:  # a value the template refuses: Jinja says why, as it always did
            return self._jinja(resolved, run_dir)

    def _new_shape(self, key: tuple[Any, ...], state: _TemplateState, template: jinja2.Template,
                   site_context: dict[str, Any], shape_part: dict[str, Any], part: dict[str, Any],
                   resolved: Resolved, run_dir: str) -> str:
        expected = self._jinja(resolved, run_dir)  # raises what the user should see
        shape: _Shape | None = None
        if state.shapes < state.MAX_SHAPES:
            assert resolved.placement is not None
            context = {**shape_part, "queue_directives": _queue_directives(resolved.placement, resolved.site),
                       **site_context}
            while True:
                try:
                    shape = _shape_text(template, context, part, {n: _value(part, n) for n in state.fixed})
                    break
                except _SlotMisuse as misuse:  # the template branches on this value: make it part of the shape
                    if misuse.name in state.fixed:
                        break
                    state.fixed = (*state.fixed, misuse.name)
                    try:
                        key = key[:3] + (tuple(_value(part, name) for name in state.fixed),)
                        hash(key)
                    except TypeError:
                        break
                except Exception:
                    break
            state.shapes += 1
        try:
            same = shape is not None and shape.fill(part) == expected
        except Exception:
            same = False
        self._shapes[key] = shape if same else _JINJA  # type: ignore[assignment]
        return expected
