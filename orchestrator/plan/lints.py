"""Plan-time lints: mistakes in a site profile (or a sweep) that validate but make every job fail
or mislead, each reported as a warning naming the file, line and field of the value at fault.

The checks are registered by name in :data:`LINTS` (``@LINTS.register("<name>")``, the project's
registry style, orchestrator/registry.py). Each takes one :class:`SiteUse`, a site (``site`` or
``site:system``) as the plan uses it: its profile, loaded once, and the plan's runs on it. Checks:

=============== =====================================================================================
relative-path   a launcher option that names a file or directory the job reads (the options models'
                ``input_paths``, orchestrator/sites/launcher_options.py), or ``python``, given as a
                relative path: the batch script changes to the run directory first, so it resolves
                there
conda-hook      a setup line ``conda activate`` with no earlier line that sets conda up in a
                non-interactive shell
nccl-plugin     ``env: NCCL_NET`` naming a network plugin with nothing that puts the plugin where NCCL
                looks for it
node-local-runs run directories (under ``ORCH_HOME``) on node-local storage of this host, for a site
                whose jobs run on other nodes
over-walltime   runs predicted to take longer than their walltime (sweep ``over_walltime: warn``, the
                default; ``skip`` skips them in orchestrator/plan/resolve.py instead)
=============== =====================================================================================

What the checks read is the profile as loaded (setup lines, env, launcher options), so they hold
for any site's profile; where a check relies on what a site's module does, the comment there says
which documentation it relies on.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from orchestrator import paths
from orchestrator.errors import SourceError
from orchestrator.plan.resolve import over_walltime
from orchestrator.registry import Registry
from orchestrator.sites.launcher_options import LAUNCHER_OPTIONS
from orchestrator.sites.profiles import SiteProfile
from orchestrator.sites.schedulers import SCHEDULERS, LocalOptions
from orchestrator.yamlsource import Loc, YamlDocument, format_loc, load_yaml

if TYPE_CHECKING:
    from orchestrator.plan.record import PlannedRun
    from orchestrator.plan.sweep import LoadedSweep


@dataclass(frozen=True)
class Lint:
    """One warning: what is wrong and how to fix it, and where the value at fault is written."""

    site: str  # site or site:system
    path: str | None  # the file (a site profile or the sweep); None where the value has no file
    line: int | None  # 1-based
    field: str  # e.g. setup[3], env.NCCL_NET, experiments[0].walltime
    message: str
    check: str = ""  # the registered name of the check (set by lint_sites)
    severity: str = "warning"

    def text(self) -> str:
        """``warning: sites/stanage.yaml:49 setup[1]: ...``, one line."""
        where = f"{_shown(self.path)}:{self.line} " if self.path and self.line else (
            f"{_shown(self.path)} " if self.path else "")
        return f"{self.severity}: {where}{self.field}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "check": self.check, "site": self.site, "path": self.path,
                "line": self.line, "field": self.field, "message": self.message}


def _shown(path: str | None) -> str:
    """A file as people read it: relative to the working directory when it is under it."""
    if not path:
        return ""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative


@dataclass
class SweepSource:
    """The sweep file's line map, to name where an experiment's walltime, or a site_overrides value,
    is written."""

    doc: YamlDocument
    variant: str | None  # the variant applied (``--variant``), whose values win

    @classmethod
    def of(cls, loaded: LoadedSweep) -> SweepSource | None:
        try:
            doc = load_yaml(loaded.path, loaded.text)
        except SourceError:  # it parsed once already; lines missing are no reason to fail a plan
            return None
        name = doc.data.get("name") if isinstance(doc.data, dict) else None
        variant = None
        if isinstance(name, str) and loaded.sweep.name.startswith(name + "-"):
            variant = loaded.sweep.name[len(name) + 1:]
        return cls(doc, variant)

    def _experiment_index(self, experiment: str) -> int | None:
        data = self.doc.data if isinstance(self.doc.data, dict) else {}
        return next((i for i, e in enumerate(data.get("experiments") or [])
                     if isinstance(e, dict) and e.get("name") == experiment), None)

    def walltime(self, experiment: str) -> tuple[Loc, int | None]:
        """(location, line) of the walltime experiment ``experiment`` runs with: a variant's own for
        the experiment, the variant's, the experiment's, else the experiment itself (the default)."""
        index = self._experiment_index(experiment)
        candidates: list[Loc] = []
        if self.variant:
            candidates += [("variants", self.variant, "experiments", experiment, "walltime"),
                           ("variants", self.variant, "walltime")]
        if index is not None:
            candidates += [("experiments", index, "walltime"), ("experiments", index)]
        for loc in candidates:
            if loc in self.doc.lines:
                return loc, self.doc.lines[loc]
        return ("experiments",), self.doc.line_of(("experiments",))

    def override(self, target: str, experiments: Iterable[str], loc: Loc) -> tuple[Loc, int | None] | None:
        """(location, line) in the sweep of the ``site_overrides`` entry that gave the profile's value
        at ``loc`` for ``target`` (``site:system``), the layer that wins first: an experiment's, then
        the sweep's, each for the system, then for the site (orchestrator/plan/sweep.py
        site_overrides_for); None when no entry is found."""
        site, _, system = target.partition(":")
        targets = ([target] if system else []) + [site]
        layers: list[Loc] = [("experiments", i, "site_overrides") for i in
                             (self._experiment_index(e) for e in experiments) if i is not None]
        bases = [layer + (t,) for layer in layers + [("site_overrides",)] for t in targets]
        for base in bases:
            if base + tuple(loc) in self.doc.lines:
                return base + tuple(loc), self.doc.lines[base + tuple(loc)]
        for base in bases:  # the entry is there, the value inside it not by that location (a list)
            for depth in range(len(loc), 0, -1):
                if base + tuple(loc[:depth]) in self.doc.lines:
                    return base + tuple(loc), self.doc.lines[base + tuple(loc[:depth])]
        return None


def _holds(data: Any, loc: Loc) -> bool:
    """Whether ``data`` (a sweep's merged site_overrides) gives the value at ``loc``: the mapping
    holds the keys down to a list or a value (a list replaces the profile's whole)."""
    for part in loc:
        if isinstance(data, dict) and part in data and data[part] is not None:
            data = data[part]
            if not isinstance(data, dict):
                return True
        else:
            return False
    return bool(loc)


@dataclass
class SiteUse:
    """A site as a plan uses it: its profile (loaded once) and the plan's runs on it."""

    profile: SiteProfile
    runs: list[PlannedRun] = field(default_factory=list)
    sweep: SweepSource | None = None

    @property
    def target(self) -> str:
        return self.profile.target

    @property
    def overrides(self) -> dict[str, Any]:
        """What the sweep's ``site_overrides`` changed in this profile for these runs (the runs of one
        profile share them: orchestrator/plan/resolve.py makes one profile per distinct set)."""
        found = getattr(self.runs[0].spec, "site_overrides", None) if self.runs else None
        return found if isinstance(found, dict) else {}

    def at(self, loc: Loc, message: str) -> Lint:
        """A warning about the profile's value at ``loc`` (of the merged profile), located where it is
        written: the sweep's site_overrides when they gave it, else the profile's file."""
        if self.sweep is not None and _holds(self.overrides, loc):
            experiments = dict.fromkeys(run.spec.experiment for run in self.runs)
            found = self.sweep.override(self.target, experiments, loc)
            if found is not None:
                return Lint(self.target, self.sweep.doc.path, found[1], format_loc(found[0]), message)
        source = self.profile.source
        if source is None:
            return Lint(self.target, None, None, format_loc(loc), message)
        path, line = source.locate(loc)
        return Lint(self.target, path, line, format_loc(source.file_loc(loc)), message)


Check = Callable[[SiteUse], Iterable[Lint]]
# Every check by name; lint_plan runs them all, in name order.
LINTS: Registry[Check] = Registry("lint")


# ---------------------------------------------------------------- relative-path

# ``${NAME}`` in launcher options is read from the environment when the plan is made (profiles.py
# expand_references); one that is still there was unset, which the resolver reports itself.
REFERENCE_MARK = "${"


def _not_absolute(value: str, run_dir: str) -> str | None:
    """Why ``value`` will not name what was meant once the job runs in ``run_dir``, with the fix; None
    for an absolute path. Launcher arguments are quoted when rendered, so ``~`` and ``$VAR`` stay text."""
    if value.startswith("/") or REFERENCE_MARK in value:
        return None  # a ${NAME} left unread: the resolver skips the run and names the variable
    fix = "give the absolute path on the file system the job's node sees"
    if value.startswith("~") or "$" in value:
        return (f"{value!r} is not expanded (orch quotes every argument, so `~` and `$` stay as written): the "
                f"job, which starts in its run directory, looks for {run_dir}/{value}; {fix}")
    return f"{value!r} is relative: the job starts in its run directory, so it names {run_dir}/{value}; {fix}"


def _path_values(value: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    """(location, text) of each path in an option's value: a text, a list or a mapping of them."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _path_values(item, loc + (index,))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _path_values(item, loc + (str(key),))


def _option_default(model: Any, name: str) -> Any:
    """The value a launcher uses for an option the profile leaves out (its model's default)."""
    info = model.model_fields[name]
    return info.get_default(call_default_factory=True)


@LINTS.register("relative-path")
def relative_paths(use: SiteUse) -> Iterator[Lint]:
    """Launcher options naming files the job reads (and ``python``) that are not absolute."""
    launcher = use.profile.launcher
    model = LAUNCHER_OPTIONS.get(launcher.name)
    # The same words for every run (and every system sharing the value), so the warning is given once.
    run_dir = str(Path(use.runs[0].run_dir).parent / "<run id>") if use.runs else "<ORCH_HOME>/runs/<sweep>/<run id>"
    runnable = {run.spec.workload for run in use.runs if not run.resolved.skipped}
    for name in model.input_paths:
        given = name in launcher.options
        value = launcher.options[name] if given else _option_default(model, name)
        if name in model.by_workload and isinstance(value, dict) and use.runs:
            value = {k: v for k, v in value.items() if k in runnable}  # what this plan's runs read
        base: Loc = ("launcher", "options", name) if given else ("launcher", "options")
        for loc, text in _path_values(value, base):
            why = _not_absolute(text, run_dir)
            if why is None:
                continue
            if given:
                yield use.at(loc, why)
            else:  # the launcher's default: the profile has no line for it, so name the option itself
                lint = use.at(loc, f"unset, so {launcher.name}'s default is used: {why}")
                yield replace(lint, field=f"{lint.field}.{name}")
    python = use.profile.python
    why = _not_absolute(python, run_dir) if python and "/" in python else None
    if why:
        yield use.at(("python",), f"{why} (or a command name found on PATH)")


# ---------------------------------------------------------------- conda-hook

# Modules that set conda up for a non-interactive shell, so that `conda activate` works in a job
# script after `module load <name>`: ALCF's `conda` module (Polaris, Sophia; docs/polaris/data-science/
# python.md, argonne-lcf/user-guides: "Explicitly (either from an interactive job, or inside a job
# script): module use /soft/modulefiles; module load conda ; conda activate base"), and NERSC's `conda`
# module, used the same way in public Perlmutter job scripts (`module load conda; conda activate
# <env>`; NERSC's own page was not read here). A `conda` module elsewhere is taken to do the same.
# Not EasyBuild's Anaconda3/Miniconda3 modules (Stanage, the UK Tier-2 sites): their easyblock
# (easybuild-easyblocks a/anaconda.py) only puts the install on PATH, so `conda activate` refuses in
# a batch job ("Run 'conda init' before 'conda activate'"); `source activate <env>` works there.
CONDA_HOOK_MODULES = ("conda",)
CONDA_SH = "etc/profile.d/conda.sh"


def _words(line: str) -> list[str]:
    """A setup line as the renderer splits it into words (orchestrator/plan/render.py shell_line)."""
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


@dataclass(frozen=True)
class CommandLine:
    """A line the batch script runs before the program, as the renderer splits it into words."""

    loc: Loc
    words: list[str]
    # Whether ``${NAME}`` in it is read from the environment when the plan is made (python_env's
    # lines are, profiles.py expand_references); a setup line's `$` stays literal text.
    reads_references: bool = False


def command_lines(profile: SiteProfile) -> list[CommandLine]:
    """The lines the script runs before the program, in its order: the setup lines, then
    python_env's module lines (where the profile model has them), each re-quoted word by word when
    rendered. python_env's own activation (a venv; conda's hook, then `conda activate`) is written
    by the renderer and needs no check."""
    lines = [CommandLine(("setup", i), _words(line)) for i, line in enumerate(profile.setup)]
    modules = getattr(getattr(profile, "python_env", None), "modules", None) or []
    lines += [CommandLine(("python_env", "modules", i), _words(str(line)), True) for i, line in enumerate(modules)]
    return lines


def _loaded_modules(words: list[str]) -> list[str]:
    """The modules a `module load|add NAME...` (or `ml NAME`) line loads, else []."""
    if words[:1] == ["module"] and words[1:2] in (["load"], ["add"]):
        return [w for w in words[2:] if not w.startswith("-")]
    if words[:1] == ["ml"]:
        return [w for w in words[1:] if not w.startswith("-")]
    return []


def _module_is(module: str, names: Iterable[str]) -> bool:
    """``conda`` or ``conda/<version>`` against ``names`` (case as written by the site)."""
    return module.split("/", 1)[0] in names


def _literal_dollar(word: str, reads_references: bool) -> bool:
    """Whether ``word`` holds a `~` or `$` the shell will not expand (every word is quoted)."""
    if reads_references:
        word = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", "", word)  # read when the plan is made
    return word.startswith("~") or "$" in word


def _conda_hook(line: CommandLine) -> tuple[bool, str] | None:
    """Whether a line sets conda's shell function up: (True, "") when it does once rendered,
    (False, why) when it tries to and cannot, None when it has nothing to do with it."""
    words = line.words
    if words[:1] in (["source"], ["."]) and len(words) > 1 and words[1].endswith(CONDA_SH):
        if _literal_dollar(words[1], line.reads_references):
            return False, (f"`{' '.join(words)}` names conda.sh with `~` or `$`, which orch quotes (setup "
                           "lines are re-quoted word by word), so the shell looks for that literal path")
        return True, ""
    if words[:1] == ["eval"] and any("hook" in w and "shell" in w for w in words[1:]):
        # orch re-quotes every word of a setup line, so `eval "$(conda shell.bash hook)"` renders as
        # eval '$(conda shell.bash hook)': eval then runs the hook's output as one simple command
        # (word-split, not parsed), and conda's function is never defined.
        return False, ("`eval \"$(conda shell.bash hook)\"` cannot work in a setup line: orch quotes each word, "
                       "so eval runs the hook's output as one command instead of as shell code")
    if any(_module_is(m, CONDA_HOOK_MODULES) for m in _loaded_modules(words)):
        return True, ""
    return None


def _is_conda_activate(words: list[str]) -> bool:
    return words[:2] == ["conda", "activate"]


@LINTS.register("conda-hook")
def conda_without_hook(use: SiteUse) -> Iterator[Lint]:
    """`conda activate` with no earlier line (setup, python_env modules) that sets conda up for a batch
    job's shell."""
    ready, broken = False, ""
    for line in command_lines(use.profile):
        hook = _conda_hook(line)
        if hook is not None:
            ready, broken = hook[0], "" if hook[0] else f"{format_loc(line.loc)}: {hook[1]}"
        if not _is_conda_activate(line.words) or ready:
            continue
        why = (f"`conda activate` needs conda's shell function, and {broken}" if broken else
               "`conda activate` needs conda's shell function, which a batch job's shell lacks (it reads no "
               "~/.bashrc, where `conda init` puts it), so conda refuses and the job stops here")
        fix = (f"add an earlier setup line `source <conda prefix>/{CONDA_SH}` (an absolute path) or a module "
               "that sets conda up (ALCF, NERSC: `module load conda`), or use `source activate <env>`")
        yield use.at(line.loc, f"{why}; {fix}")


# ---------------------------------------------------------------- nccl-plugin

# NCCL_NET forces one network (NCCL's environment variables page: it "has to match exactly the name of
# the NCCL network used (case-insensitive). Internal network names are "IB" (generic IB verbs) and
# "Socket" (TCP/IP sockets). External network plugins define their own names"). Any other name is a
# plugin's ("AWS Libfabric" and "OFI" are aws-ofi-nccl's), which NCCL loads as libnccl-net.so from the
# library path, or as the library NCCL_NET_PLUGIN names (a file name, or libnccl-net-<suffix>.so); when
# no network of that name was loaded NCCL's init fails ("Error: network %s not found.", ncclInvalidUsage:
# src/transport/net.cc). An NCCL_NET_PLUGIN of the profile's own is taken to find its library.
NCCL_BUILTIN_NETS = ("ib", "socket")
# Words in a library path, plugin setting or module name that mean the plugin is there.
NCCL_PLUGIN_MARKS = ("ofi-nccl", "ofi_nccl", "aws-ofi", "nccl-net", "nccl_net", "rdma-sharp")
# Module trees whose `conda` module sets the plugin up. ALCF Polaris (docs/polaris/applications-and-
# libraries/libraries/nccl.md, argonne-lcf/user-guides): NCCL_NET="AWS Libfabric" with
# /soft/libraries/aws-ofi-nccl/.../lib on LD_LIBRARY_PATH, and "As of now (October 29, 2024), these
# environment variable settings have been included by default in the `conda` modules on Polaris"
# (the modules under /soft/modulefiles); a `conda/<date>` module built before that date does not.
ALCF_MODULE_TREE = "/soft/modulefiles"
ALCF_CONDA_PLUGIN_SINCE = "2024-10-29"
_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})")


def _marks_plugin(text: str) -> bool:
    return any(mark in text.lower() for mark in NCCL_PLUGIN_MARKS)


def _alcf_conda_with_plugin(module: str) -> bool:
    name, _, version = module.partition("/")
    if name != "conda":
        return False
    dated = _DATED.match(version)
    return dated is None or dated.group(1) >= ALCF_CONDA_PLUGIN_SINCE


def _plugin_provided(profile: SiteProfile) -> bool:
    """Whether the profile's env, env_prepend or script lines put an NCCL net plugin where NCCL finds it."""
    env = profile.env
    if (env.get("NCCL_NET_PLUGIN") or "").strip().lower() not in ("", "none"):
        return True
    prepended = (getattr(profile, "env_prepend", None) or {}).get("LD_LIBRARY_PATH") or []
    if _marks_plugin(env.get("LD_LIBRARY_PATH") or "") or any(_marks_plugin(str(d)) for d in prepended):
        return True
    alcf_tree = False
    for line in command_lines(profile):
        words = line.words
        if words[:2] == ["module", "use"] and ALCF_MODULE_TREE in [w.rstrip("/") for w in words[2:]]:
            alcf_tree = True
        modules = _loaded_modules(words)
        if any(_marks_plugin(m) for m in modules):
            return True
        if alcf_tree and any(_alcf_conda_with_plugin(m) for m in modules):
            return True
        if words[:1] == ["export"] and any(
                w.startswith(("LD_LIBRARY_PATH=", "NCCL_NET_PLUGIN=")) and _marks_plugin(w) for w in words[1:]):
            return True
    return False


@LINTS.register("nccl-plugin")
def nccl_net_without_plugin(use: SiteUse) -> Iterator[Lint]:
    """``env: NCCL_NET`` naming a plugin's network with nothing that provides the plugin."""
    net = use.profile.env.get("NCCL_NET")
    if net is None or net.strip().lower() in NCCL_BUILTIN_NETS or _plugin_provided(use.profile):
        return
    yield use.at(("env", "NCCL_NET"), (
        f"NCCL_NET {net!r} forces NCCL onto a network plugin, and nothing in this profile provides it: no "
        "setup line or env puts the plugin (aws-ofi-nccl, libnccl-net*.so) on LD_LIBRARY_PATH or names it in "
        "NCCL_NET_PLUGIN, and no module that ships it is loaded, so NCCL stops at start with 'network "
        f"{net} not found'; load the site's module that provides it (Polaris: ALCF's conda module), put its "
        "lib directory on LD_LIBRARY_PATH, or drop NCCL_NET"))


# ---------------------------------------------------------------- node-local-runs

# Storage that belongs to one node: a batch job on another node sees its own (empty) copy, or none.
NODE_LOCAL_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run/user", "/local", "/scratch/local", "/localscratch",
                    "/lscratch", "/local_scratch")
TMPDIR_VARS = ("TMPDIR", "TMP", "TEMP", "SLURM_TMPDIR", "LOCAL_SCRATCH")


def _node_local_roots() -> list[Path]:
    roots = [Path(p) for p in NODE_LOCAL_ROOTS]
    roots += [Path(os.environ[v]) for v in TMPDIR_VARS if os.environ.get(v, "").startswith("/")
              and os.environ[v].rstrip("/")]
    return roots + [r.resolve() for r in roots if r.exists()]


def node_local_root(path: str | Path) -> Path | None:
    """The node-local root ``path`` lies under (/tmp, $TMPDIR, ...), or None."""
    candidates = {Path(path), Path(path).resolve()}
    for root in _node_local_roots():
        if any(p == root or p.is_relative_to(root) for p in candidates):
            return root
    return None


def _runs_here(profile: SiteProfile) -> bool:
    """Whether the site's jobs run on this host: its scheduler's executor runs them here (local,
    appliance: orchestrator/sites/schedulers.py, whose options derive from LocalOptions), or the
    profile says its nodes see this host's node-local paths (the sandbox, a rehearsal)."""
    if profile.node_local_ok:
        return True
    try:
        return issubclass(SCHEDULERS.get(profile.scheduler), LocalOptions)
    except KeyError:
        return False


@LINTS.register("node-local-runs")
def runs_on_node_local_storage(use: SiteUse) -> Iterator[Lint]:
    """Run directories on this host's node-local storage, for a site whose jobs run elsewhere."""
    if not use.runs or _runs_here(use.profile):
        return
    run_dir = use.runs[0].run_dir
    root = node_local_root(run_dir)
    if root is not None:
        runs_root = str(Path(run_dir).parent.parent)
        yield use.at(("scheduler",), (
            f"run directories under {runs_root} are on this host's node-local storage ({root}): a "
            f"{use.profile.scheduler} job on a compute node cannot see them; put ORCH_HOME on a file system the "
            "nodes share (home, project), or set node_local_ok: true here if the nodes run on this host"))
    # The jobs import the workloads package from this checkout (it goes on their PYTHONPATH).
    checkout = paths.workloads_root()
    root = node_local_root(checkout)
    if root is not None:
        yield use.at(("scheduler",), (
            f"the checkout the jobs import workloads from ({checkout}) is on this host's node-local storage "
            f"({root}): a {use.profile.scheduler} job on a compute node cannot import it; clone orch on a file "
            "system the nodes share (home, project)"))


# ---------------------------------------------------------------- over-walltime

def _overrun(run: PlannedRun) -> float:
    """How many times its walltime a planned run is predicted to take (0 for a skipped run)."""
    placement, run_s = run.resolved.placement, run.resolved.predicted_run_s
    return (run_s or 0.0) / placement.walltime_s if placement is not None and placement.walltime_s else 0.0


@LINTS.register("over-walltime")
def predicted_past_walltime(use: SiteUse) -> Iterator[Lint]:
    """Runs planned with a walltime shorter than their predicted run time (over_walltime: warn), one
    warning per experiment, located at the walltime the experiment runs with."""
    by_experiment: dict[str, list[PlannedRun]] = {}
    for run in use.runs:
        if _overrun(run) > 1.0:
            by_experiment.setdefault(run.spec.experiment, []).append(run)
    for experiment, runs in by_experiment.items():
        worst = max(runs, key=_overrun)
        assert worst.resolved.placement is not None
        why = over_walltime(worst.resolved.predicted_run_s, worst.resolved.placement.walltime_s)
        several = len(runs) > 1
        message = (f"{len(runs)} run{'s' if several else ''} of experiment {experiment} on {use.target} would time "
                   f"out by the prediction: {why} (run {worst.spec.id}{', the furthest over' if several else ''}); "
                   "raise walltime: (or use walltime: auto), or set over_walltime: skip to skip "
                   f"{'them' if several else 'it'}")
        path, line, field_name = None, None, "walltime"
        if use.sweep is not None:
            loc, line = use.sweep.walltime(experiment)
            path = use.sweep.doc.path
            field_name = format_loc(loc) + ("" if loc and loc[-1] == "walltime" else ".walltime")
        yield Lint(use.target, path, line, field_name, message)


# ---------------------------------------------------------------- the plan

def site_uses(plans: Iterable[PlannedRun], sweep: SweepSource | None = None) -> list[SiteUse]:
    """Each site (``site`` or ``site:system``) the plan uses, with its runs, in the plan's order: one
    per profile the runs were resolved with (a site's runs share one, unless a sweep's
    ``site_overrides`` changed it for some)."""
    uses: dict[int, SiteUse] = {}  # by profile: a sweep's site_overrides make a profile of their own
    for run in plans:
        profile = run.resolved.site
        use = uses.get(id(profile))
        if use is None:
            use = uses[id(profile)] = SiteUse(profile, [], sweep)
        use.runs.append(run)
    return list(uses.values())


def lint_sites(uses: Iterable[SiteUse]) -> list[Lint]:
    """Every check on every site, each profile once; a warning about a value that several systems of
    one site share (the same file, line and message) is given once."""
    found: list[Lint] = []
    seen: set[tuple[str, str | None, int | None, str, str]] = set()
    for use in uses:
        for name, check in LINTS.items():
            for lint in check(use):
                key = (name, lint.path, lint.line, lint.field, lint.message)
                if key not in seen:
                    seen.add(key)
                    found.append(replace(lint, check=name))
    return found


def lint_plan(plans: Iterable[PlannedRun], loaded: LoadedSweep | None = None) -> list[Lint]:
    """The warnings of a plan: every site it uses, linted once, and its runs against their walltimes
    (located in the sweep file when ``loaded`` is given)."""
    sweep = SweepSource.of(loaded) if loaded is not None else None
    return lint_sites(site_uses(plans, sweep))
