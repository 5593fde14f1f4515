"""``orch sites check``: a site's representative scripts, judged by its twin's Slurm.

For each Slurm system of a site, the runs a user would most often submit (one device, one
full node, two nodes, the largest automatically chosen queue at its limits) go through the
normal plan path (``RunSpec`` -> :func:`orchestrator.plan.resolve.resolve` ->
:func:`orchestrator.plan.render.render_script`) and each rendered script is handed to
``sbatch --test-only`` on the sandbox configured as the site's twin
(:func:`orchestrator.sites.sandbox.twin_layout`). What the twin refuses (an unknown partition,
account or QoS, a walltime or node count over a partition's limit, gres or CPUs a node does
not have) the site would refuse too.

The twin must be up: :func:`check_site` brings it up itself (``orch sandbox up --like SITE``
is idempotent; a switch restarts the Slurm daemons, some seconds) unless ``bring_up`` is
False, when it only says what to run. PBS systems (Polaris, the AI Testbed's Groq) and
appliances (Cerebras, Gaudi) have no twin here; they are listed as such, never passed.

Graphcore's ``--ipus``: a stock Slurm answers ``sbatch: unrecognized option '--ipus=4'``; the
twin loads a SPANK stand-in that adds the option and checks the count (a power of two, at
most the Pod's). Where that stand-in cannot be built (no C compiler) the option is reported
as not verifiable here and the rest of the script is checked without it.

:func:`rehearsal_profile` writes a copy of a site profile whose scripts keep every directive
of the site but run the workload on this machine's CPU (device ``cpu``, this Python, no
module setup lines, a launcher this machine has), so that a sweep written for the site runs
on its twin unchanged: ``orch --sites-dir DIR run sweep.yaml``. A PBS site (Polaris) has
no twin; its rehearsal profile runs through orch's PBS emulator, named by absolute path in the
profile (``executor.commands_dir``, :func:`pbs_rehearsal_setup`) even where a PBS install puts
its own ``qsub`` first on PATH: that proves orch's PBS path with the site's directives, not that
the site's server accepts them.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from orchestrator.errors import UserError
from orchestrator.escape import one_line
from orchestrator.plan.expand import RunSpec
from orchestrator.plan.render import RunFiles, environment, render_script
from orchestrator.plan.resolve import resolve
from orchestrator.sites import sandbox
from orchestrator.sites.profiles import SiteProfile, expand_references, find_site_file, load_site
from orchestrator.sites.sandbox.proc import _clean_env
from orchestrator.sites.vendors.base import check_case
from orchestrator.yamlsource import load_yaml

SHAPES = ("1-device", "1-node", "2-nodes", "largest-queue")
SHAPE_WALLTIME_S = 1800
CHECK_SWEEP = "sitecheck"
# The prefix a check gives a site whose python_env the user must name (sbatch --test-only reads
# only the directives).
STAND_IN_PYTHON_ENV = "/orch-sites-check/stand-in-python-env"


class NoTwinError(UserError):
    """The site (or the system named) has no Slurm system, hence no twin here."""

    exit_code = 2


@dataclass(frozen=True)
class Shape:
    name: str
    devices: int
    queue: str | None  # asked for by name (the largest queue), else the site chooses
    walltime_s: int


def shapes(site: SiteProfile) -> list[Shape]:
    """The representative runs of a site (the golden-file cases of tests/sites)."""
    per_node = site.device.per_node
    auto = [q for q in site.queues if q.auto] or site.queues
    largest = max(auto, key=lambda q: (q.max_nodes, q.max_devices or math.inf, q.max_walltime_s))
    devices = largest.max_nodes * per_node
    if largest.max_devices is not None:
        devices = min(devices, largest.max_devices)
    return [
        Shape("1-device", 1, None, SHAPE_WALLTIME_S),
        Shape("1-node", per_node, None, SHAPE_WALLTIME_S),
        Shape("2-nodes", 2 * per_node, None, SHAPE_WALLTIME_S),
        Shape("largest-queue", devices, largest.name, largest.max_walltime_s),
    ]


def _precision(site: SiteProfile) -> str:
    return "fp32" if "fp32" in site.device.precisions else site.device.precisions[0]


def spec_for(target: str, site: SiteProfile, shape: Shape, sweep: str = CHECK_SWEEP) -> RunSpec:
    name, _, system = target.partition(":")
    # A GEMM, or on a system that runs a vendor's own tool a model its runner can run.
    workload, batch, seq, params = check_case(site.launcher.name) or (
        "gemm", None, None, (("k", 1024), ("m", 1024), ("n", 1024)))
    return RunSpec(sweep=sweep, experiment=shape.name, workload=workload, site=name, system=system or None,
                   devices=shape.devices, precision=_precision(site), strategy=None, batch_size=batch,
                   seq_len=seq, repeat=0, params=params, walltime_s=shape.walltime_s, queue=shape.queue)


def check_env(site: SiteProfile, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the twin's stand-in account / QoS where the site requires one and none is set
    (the same stand-ins :func:`orchestrator.sites.sandbox.twin_layout` creates)."""
    out = dict(env)
    acct = site.account
    if acct.required and acct.account(out) is None:
        out[acct.env] = sandbox.STAND_IN_ACCOUNT
    if acct.qos_required and acct.qos(out) is None and acct.qos_env:
        out[acct.qos_env] = sandbox.STAND_IN_QOS
    # A Python environment the user must name, and the paths a profile reads from the environment
    # (``${NAME}``): the twin judges directives, not the environment the job would run in.
    python_env = site.python_env
    if python_env.required and python_env.prefix is None and python_env.prefix_env and not out.get(
            python_env.prefix_env):
        out[python_env.prefix_env] = STAND_IN_PYTHON_ENV
    read = [python_env.modules, python_env.conda, python_env.default, python_env.prefix, site.launcher.options]
    for name in expand_references(read, out)[1]:
        out[name] = STAND_IN_PYTHON_ENV
    return out


@dataclass
class CheckRow:
    target: str
    shape: str
    result: str  # accepted, rejected, skipped, no twin
    detail: str = ""
    devices: int | None = None
    nodes: int | None = None
    queue: str | None = None
    script: str | None = None  # the rendered script checked (a file under the report's workdir)
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    site: str
    twin: str | None
    rows: list[CheckRow]
    twin_notes: list[str] = field(default_factory=list)
    workdir: str | None = None

    @property
    def rejected(self) -> list[CheckRow]:
        return [r for r in self.rows if r.result == "rejected"]

    @property
    def checked(self) -> list[CheckRow]:
        return [r for r in self.rows if r.result in ("accepted", "rejected")]

    @property
    def ok(self) -> bool:
        return bool(self.checked) and not self.rejected

    @property
    def exit_code(self) -> int:
        if self.rejected:
            return 1
        return 0 if self.checked else 2

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "twin": self.twin, "ok": self.ok, "exit_code": self.exit_code,
                "twin_notes": list(self.twin_notes), "workdir": self.workdir,
                "checks": [asdict(r) for r in self.rows]}


def sbatch_test_only(script: Path, cwd: Path | None = None) -> tuple[bool, str]:
    """(accepted, Slurm's words) for ``sbatch --test-only script``: the controller checks the
    job against partitions, limits, associations and QoS without queueing it."""
    env = _clean_env()
    try:
        cp = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60,
                            env=env, cwd=str(cwd or script.parent))
    except FileNotFoundError:
        raise UserError("sbatch not found: the sandbox Slurm is not installed (orch sandbox up)") from None
    except subprocess.TimeoutExpired:
        return False, "sbatch --test-only timed out after 60 s"
    lines = [ln.strip() for ln in (cp.stdout + "\n" + cp.stderr).splitlines() if ln.strip()]
    text = "; ".join(re.sub(r"^sbatch: (error: )?", "", ln) for ln in lines)
    accepted = cp.returncode == 0 and "to start at" in text
    return accepted, text or f"sbatch exited {cp.returncode}"


def _strip_directive(text: str, option: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(f"#SBATCH {option}"))


def ensure_twin(site: str, env: Mapping[str, str], sites_dirs: list[Path] | None = None,
                bring_up: bool = True) -> sandbox.SandboxStatus:
    """The sandbox as a twin of ``site``: brought up (idempotent) or, with ``bring_up`` False,
    checked to be that twin already."""
    if bring_up:
        return sandbox.up(like=site, env=env, sites_dirs=sites_dirs)
    wanted = sandbox.twin_layout(site, env, sites_dirs)
    active = sandbox.active_layout()
    st = sandbox.status()
    if active.to_json() != wanted.to_json() or not st.ok:
        now = f"a twin of {active.twin}" if active.twin else "the plain sandbox"
        if active.twin == wanted.twin:
            now += " with other accounts/QoS or limits"
        raise UserError(f"the sandbox is {now}{'' if st.ok else ' (not running)'}, not a twin of {wanted.twin}: "
                        f"run `orch sandbox up --like {site}` first (as root), or drop --no-up")
    return st


def check_site(site_arg: str, env: Mapping[str, str], sites_dirs: list[Path] | None = None,
               bring_up: bool = True, workdir: Path | None = None) -> CheckReport:
    """Render the representative scripts of ``site_arg`` (``site`` for all its systems, or
    ``site:system``) and have the twin judge each with ``sbatch --test-only``."""
    name, targets = sandbox.site_targets(site_arg, sites_dirs)
    _, _, system = site_arg.partition(":")
    if system:
        targets = [(t, p) for t, p in targets if t == site_arg]
        if not targets:  # a system identical to the site itself is listed under the site's name
            targets = [(site_arg, load_site(site_arg, sites_dirs))]
    rows: list[CheckRow] = []
    slurm = [(t, p) for t, p in targets if p.scheduler == "slurm"]
    for target, prof in targets:
        if prof.scheduler != "slurm":
            why = ("PBS Pro: no twin here (no PBS server can run on this machine; orch's PBS executor is "
                   "tested against a PBS emulator only)" if prof.scheduler == "pbs" else
                   f"{prof.scheduler}: no twin here (no batch scheduler: the runner is started directly)")
            rows.append(CheckRow(target, "-", "no twin", why))
    if not slurm:
        report = CheckReport(name, None, rows)
        if system or not rows:
            raise NoTwinError(f"{site_arg}: " + (rows[0].detail if rows else "no Slurm system"))
        return report

    st = ensure_twin(name, env, sites_dirs, bring_up)
    layout = sandbox.active_layout()
    root = workdir or Path(tempfile.mkdtemp(prefix="orch-sitecheck-"))
    jinja = environment()
    for target, prof in slurm:
        run_env = check_env(prof, env)
        python = prof.python or sys.executable
        for shape in shapes(prof):
            spec = spec_for(target, prof, shape)
            resolved = resolve(spec, prof, run_env, python, queue=shape.queue)
            if resolved.skipped:
                rows.append(CheckRow(target, shape.name, "skipped", f"the profile cannot: {resolved.skip_reason}",
                                     devices=shape.devices))
                continue
            placement = resolved.placement
            assert placement is not None
            row = CheckRow(target, shape.name, "", devices=shape.devices, nodes=placement.nodes,
                           queue=placement.queue_label or "(default)")
            part = layout.partition(placement.queue) if placement.queue else layout.default_partition()
            capacity = layout.partition_nodes(part.name) if part else 0
            if part is not None and placement.nodes > capacity:
                row.result, row.detail = "skipped", (
                    f"{placement.nodes} nodes: the twin holds {capacity} virtual node(s) in partition {part.name}")
                rows.append(row)
                continue
            files = RunFiles(root / target.replace(":", "+") / shape.name)
            files.run_dir.mkdir(parents=True, exist_ok=True)
            text = render_script(resolved, files, jinja)
            if "\n#SBATCH --ipus" in text:
                if st.ipus:
                    row.notes.append("--ipus checked by the twin's SPANK stand-in for Graphcore's Slurm "
                                     "(the count only: power of two, at most the Pod's; no IPUs are allocated)")
                else:
                    text = _strip_directive(text, "--ipus")
                    row.notes.append("--ipus not verifiable here: a stock Slurm has no such option (Graphcore's "
                                     "modified Slurm adds it) and the stand-in could not be built; checked without it")
            files.script.write_text(text)
            row.script = str(files.script)
            accepted, message = sbatch_test_only(files.script, files.run_dir)
            row.result, row.detail = ("accepted" if accepted else "rejected"), message
            rows.append(row)
    return CheckReport(name, layout.twin, rows, twin_notes=list(layout.notes), workdir=str(root))


# --------------------------------------------------------------------------------------
# Rehearsal profiles: the site's directives, this machine's CPU
# --------------------------------------------------------------------------------------

# Launchers that start vendor software (or a compile step the workloads do not have).
VENDOR_LAUNCHERS = ("sambaflow", "gaudi_spawn", "cerebras", "poptorch", "groqflow")
# Launchers that are programs to be found on PATH.
PROGRAM_LAUNCHERS = ("mpirun", "mpiexec", "deepspeed")


def _runs_here(launcher: Mapping[str, Any]) -> bool:
    name = launcher.get("name", "python")
    if name in VENDOR_LAUNCHERS:
        return False
    if name in PROGRAM_LAUNCHERS:
        return shutil.which(name) is not None
    return True


def _rehearse_systems(data: dict[str, Any], name: str, python: str, changes: list[str], scheduler: str,
                      why_not: str) -> None:
    """Each system of the site rehearsed as the site is; one of another scheduler is left out (said why)."""
    systems = data.get("systems") or {}
    kept: dict[str, Any] = {}
    for sys_name, overrides in systems.items():
        overrides = dict(overrides or {})
        if overrides.get("scheduler", scheduler) != scheduler:
            changes.append(f"{name}:{sys_name}: left out ({overrides.get('scheduler')}: {why_not})")
            continue
        _rehearse(overrides, f"{name}:{sys_name}", python, changes, top=False, scheduler=scheduler)
        kept[sys_name] = overrides
    if systems:
        data["systems"] = kept


def _rehearse(section: dict[str, Any], label: str, python: str, changes: list[str], top: bool,
              scheduler: str = "slurm") -> None:
    device = section.get("device")
    if isinstance(device, dict):
        old = device.get("type")
        if old != "cpu":
            device["accelerator"] = True  # the real node's devices are: same whole-node requests
        device["type"] = "cpu"
        device["model"] = f"{device.get('model', old)} [twin rehearsal on CPU]"
        device.pop("peak_tflops", None)  # an MFU against the site's peak would mean nothing
        changes.append(f"{label}: device {old} -> cpu (scheduler requests unchanged: per_node, per_card kept)")
    if top or "python" in section:
        if section.get("python") != python:
            before = section.get("python") or "(the one running orch)"
            changes.append(f"{label}: python {before} -> {python}")
        section["python"] = python
    if section.get("setup"):
        changes.append(f"{label}: setup lines dropped ({len(section['setup'])}: no modules here)")
        section["setup"] = []
    # The site's Python environment (its modules, venv or conda) and library paths are the site's
    # nodes', not this machine's: the rehearsal runs this interpreter (python above).
    python_env = section.get("python_env")
    if top or python_env is not None:
        if isinstance(python_env, dict) and python_env.get("kind", "none") != "none":
            changes.append(f"{label}: python_env {python_env.get('kind')} dropped (this machine's python runs)")
        section["python_env"] = {"kind": "none"}
    if section.get("env_prepend"):
        changes.append(f"{label}: env_prepend dropped ({', '.join(section['env_prepend'])}: the site's paths)")
        section["env_prepend"] = {}
        # A network plugin NCCL_NET names came from those paths (Polaris' AWS OFI plugin): kept
        # without them, every plan on the copy warned of the missing plugin (issue 53, message 12).
        env = section.get("env")
        if isinstance(env, dict) and env.get("NCCL_NET") is not None:
            changes.append(f"{label}: env NCCL_NET={env.pop('NCCL_NET')} dropped (its plugin was on the site's paths)")
    launcher = section.get("launcher")
    if top and launcher is None:
        launcher = section["launcher"] = {"name": "python"}
    if isinstance(launcher, dict) and scheduler == "pbs" and launcher.get("name") in PROGRAM_LAUNCHERS:
        # The site's mpiexec is its own (PALS on Polaris: --depth, --cpu-bind), not this machine's.
        changes.append(f"{label}: launcher {launcher.get('name')} -> torchrun (the site's MPI launcher and "
                       "its options are not this machine's)")
        section["launcher"] = launcher = {"name": "torchrun"}
    if isinstance(launcher, dict) and not _runs_here(launcher):
        # On PBS torchrun is standalone on one node (mpiexec only starts it on several).
        instead = "srun" if scheduler == "slurm" else "torchrun"
        changes.append(f"{label}: launcher {launcher.get('name')} -> {instead} (not runnable on this machine)")
        section["launcher"] = {"name": instead}


def rehearsal_profile(site: str, sites_dirs: list[Path] | None = None,
                      python: str | None = None) -> tuple[str, str, list[str]]:
    """(file name, YAML text, changes): the site's profile for a rehearsal on its twin.

    Everything that makes the batch script's directives (queues, account, QoS, resources,
    node layout, device counts per node and per card) stays the site's; what runs inside it
    becomes runnable here: device ``cpu``, ``python`` this interpreter, no setup lines,
    launcher ``srun`` where the site's starts vendor software or a program this machine lacks.
    Systems with no twin (PBS, appliances) are left out. The profile keeps the site's name, so
    a sweep written for the site runs unchanged with ``--sites-dir``.
    """
    name = site.partition(":")[0]
    path = find_site_file(name, sites_dirs)
    # Validated first, and read by the same bounded reader: a malformed profile is its own
    # file:line error here, as everywhere else, and no traceback halfway through the copy.
    load_site(name, sites_dirs)
    data = load_yaml(path).data
    python = python or sys.executable
    if data.get("scheduler") == "pbs":
        return _pbs_rehearsal(name, path, data, python)
    if data.get("scheduler") != "slurm":
        raise NoTwinError(f"site {name} schedules with {data.get('scheduler')}: no twin, so no rehearsal here")
    changes: list[str] = []
    _rehearse(data, name, python, changes, top=True)
    # The twin's virtual nodes (n1, n2, ...) are all this host and their names do not resolve: ranks
    # meet at 127.0.0.1, as on the plain sandbox (sites/sandbox.yaml). Without it a run of two ranks
    # waits for a rendezvous at n1 that never comes (what `orch sites probe` found).
    env = data.setdefault("env", {}) if isinstance(data.get("env", {}), dict) else {}
    if env.get("MASTER_ADDR") != "127.0.0.1":
        env["MASTER_ADDR"] = "127.0.0.1"
        changes.append(f"{name}: env MASTER_ADDR -> 127.0.0.1 (the twin's virtual nodes are this host)")
    _rehearse_systems(data, name, python, changes, "slurm", "no twin")
    data["description"] = f"Twin rehearsal of {name}: its batch directives, this machine's CPU. " + str(
        data.get("description", ""))
    data["node_local_ok"] = True  # the twin's virtual nodes run on this host: they see its /tmp
    changes[:] = [one_line(c) for c in changes]  # a value's newline would start a live line below
    header = (f"# Twin rehearsal of site {one_line(name)}, written by `orch sites rehearsal` from {one_line(path)}.\n"
              "# Directives (partitions, account, QoS, gres, CPUs, memory) are the site's; the workload runs\n"
              "# on this machine's CPU. Use it with the sandbox as the site's twin:\n"
              f"#   orch sandbox up --like {one_line(name)}; orch --sites-dir <this dir> run <sweep>\n"
              + "".join(f"# - {c}\n" for c in changes))
    return f"{name}.yaml", header + yaml.safe_dump(data, sort_keys=False), changes


# --------------------------------------------------------------------------------------
# PBS: no twin; a PBS server on this machine if there is one, else orch's PBS emulator
# --------------------------------------------------------------------------------------

PBS_REHEARSAL_PROVES = (
    "orch's whole PBS path with the site's own directives: scripts rendered for the site, submitted "
    "with qsub (arrays with -J), followed with qstat -x -t -f -F json, collected, cancelled with qdel; "
    "the workload runs on this machine's CPU")
PBS_REHEARSAL_DOES_NOT_PROVE = (
    "that the site's server accepts the job: the emulator takes any queue, project (-A), select "
    "resource (system=...), filesystems and walltime, and enforces no queue limits; nor PALS mpiexec, "
    "GPU binding, modules or conda, or runs over several nodes (the emulator runs jobs on this host)")


def _pbs_rehearsal(name: str, path: Path, data: dict[str, Any], python: str) -> tuple[str, str, list[str]]:
    changes: list[str] = []
    _rehearse(data, name, python, changes, top=True, scheduler="pbs")
    _rehearse_systems(data, name, python, changes, "pbs", "not PBS")
    data["description"] = f"PBS rehearsal of {name} on this machine: its batch directives, this CPU. " + str(
        data.get("description", ""))
    data["node_local_ok"] = True  # the PBS server or emulator here runs jobs on this host
    changes[:] = [one_line(c) for c in changes]  # a value's newline would start a live line below
    header = (f"# PBS rehearsal of site {one_line(name)}, written by `orch sites rehearsal` from {one_line(path)}.\n"
              "# Directives (select, place, filesystems, queues, project) are the site's; the workload runs on\n"
              "# this machine's CPU, through a PBS server here or orch's PBS emulator (see pbs-env.sh).\n"
              f"# Proves: {PBS_REHEARSAL_PROVES}.\n# Does not prove: {PBS_REHEARSAL_DOES_NOT_PROVE}.\n"
              + "".join(f"# - {c}\n" for c in changes))
    return f"{name}.yaml", header + yaml.safe_dump(data, sort_keys=False), changes


def pbs_emulator_path() -> Path | None:
    """orch's PBS emulator (``tests/pbs/pbs_emulator.py`` of a source checkout), if this install has it."""
    candidate = Path(__file__).resolve().parents[2] / "tests" / "pbs" / "pbs_emulator.py"
    return candidate if candidate.is_file() else None


def pbs_rehearsal_setup(output: Path) -> tuple[list[str], str | None]:
    """What runs a PBS rehearsal here: lines to print, and the directory of the emulator's qsub,
    qstat and qdel (``output/pbs-bin``, with ``output/pbs-env.sh``) to put in the rehearsal
    profile's ``executor.commands_dir``; None when this install has no emulator.

    The emulator is chosen explicitly, by absolute path, whether or not a ``qsub`` is on PATH:
    a PBS install's profile script puts its own ``qsub`` first on every login shell's PATH, and
    a rehearsal that took whatever ``qsub`` came first sent its jobs to that server while saying
    it used the emulator."""
    output = output.resolve()
    lines = [f"proves: {PBS_REHEARSAL_PROVES}", f"does not prove: {PBS_REHEARSAL_DOES_NOT_PROVE}"]
    emulator = pbs_emulator_path()
    if emulator is None:
        found = shutil.which("qsub")
        where = (f"the profile runs against the PBS server of {found} (first qsub on PATH)" if found
                 else "no qsub on PATH either: the profile cannot run here")
        return [f"this install has no PBS emulator (tests/pbs/pbs_emulator.py of a source checkout): {where}",
                *lines], None
    bin_dir = output / "pbs-bin"
    server_home = output / "pbs-server"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for command in ("qsub", "qstat", "qdel"):
        shim = bin_dir / command
        # The server's state directory is baked in: the profile's commands_dir alone reaches it.
        shim.write_text(f"#!{sys.executable}\nimport os, sys\nsys.path.insert(0, {str(emulator.parent)!r})\n"
                        f"os.environ.setdefault('PBS_EMU_HOME', {str(server_home)!r})\n"
                        f"import pbs_emulator\nsys.exit(pbs_emulator.main({command!r}, sys.argv[1:]))\n")
        shim.chmod(0o755)
    env = output / "pbs-env.sh"
    env.write_text("# orch's PBS emulator for a rehearsal: source this file (the profile already names pbs-bin\n"
                   "# as its executor.commands_dir, so orch reaches the emulator even with a PBS qsub on PATH).\n"
                   f"export PATH={shlex.quote(str(bin_dir))}:\"$PATH\"\n"
                   f"export PBS_EMU_HOME={shlex.quote(str(server_home))}\n")
    other = shutil.which("qsub")
    seen = (f" (the qsub first on PATH, {other}, is not used: the profile names the emulator's commands)"
            if other and Path(other).resolve().parent != bin_dir else "")
    return ["the rehearsal runs through orch's PBS emulator, by absolute path " + str(bin_dir) + seen
            + " (it runs each job with bash on this host, at most $PBS_EMU_SLOTS at once, as OpenPBS 23.06 "
            "reports them)", f"for qsub/qstat by hand: source {env}", *lines], str(bin_dir)


def with_pbs_commands_dir(text: str, commands_dir: str) -> str:
    """A rehearsal profile's text with ``executor.commands_dir`` set (its leading comments kept)."""
    lines = text.splitlines(keepends=True)
    head = 0
    while head < len(lines) and lines[head].startswith("#"):
        head += 1
    data = yaml.safe_load("".join(lines[head:])) or {}
    executor = dict(data.get("executor") or {})
    executor["commands_dir"] = commands_dir
    data["executor"] = executor
    return "".join(lines[:head]) + yaml.safe_dump(data, sort_keys=False)


def rehearsal_folder(output: Path) -> None:
    """Make `orch sites rehearsal`'s output folder, or say plainly why it cannot be one (issue 53:
    an existing file there ended in a FileExistsError traceback)."""
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output}: a file, not a folder; give the folder to write <site>.yaml into")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--output {output}: cannot make the folder ({exc.strerror})") from None


def write_rehearsal_profile(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the rehearsal profile ({exc.strerror})") from None
