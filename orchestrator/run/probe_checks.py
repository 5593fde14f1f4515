"""The verdict on one site probe: each check of what a campaign depends on, and what to fix.

Pure: the probe program's report (``workloads/probe.py``, the ``probe`` section of its metrics
file; None when none came back), what orch expected when it submitted the probe (the marker's
token, the ranks and nodes it asked for, the device type and the modules the profile loads) and
how the job ended go in; one :class:`Check` per name in :data:`CHECKS` comes out.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

# The checks, in the order a person fixes them: nothing else matters while Python does not start.
CHECKS = ("python", "torch", "deepspeed", "devices", "allreduce", "nodes", "run_dir_visible", "modules")

# ``ml`` words that are not module names (Lmod's sub-commands).
_ML_COMMANDS = frozenset({"purge", "list", "avail", "av", "spider", "use", "unuse", "unload", "rm", "del", "show",
                          "swap", "sw", "save", "restore", "reset", "help", "whatis", "keyword", "load", "add"})

FIX_SHARED_FS = ("put orch's state directory on a filesystem the compute nodes mount (run orch from there, or set "
                 "ORCH_HOME to a directory on home or project space, not /tmp or a node-local disk)")

_FIX_TORCH = ("install PyTorch for {exe}, or point the profile's python: at an interpreter that has it "
              "(or add the module or environment that provides it to setup:)")


@dataclass(frozen=True)
class Expected:
    """What the probe was submitted to find (stored beside its run directory as ``probe.json``)."""

    token: str
    nodes: int
    ranks: int
    device_type: str
    python: str
    backend: str
    run_dir: str
    modules: list[str] = field(default_factory=list)
    stdout: str = ""  # the job's log files on the login node
    stderr: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any], token: str) -> "Expected":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "token"}
        return cls(token=token, **known)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("token")  # the token lives in the database and the marker file only
        return data


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    value: Any  # what was found (a version, a count, GB/s, True/False); None: not found out
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobEnd:
    """How the probe's job ended, as the scheduler (or the submit) said."""

    state: str  # completed, failed, or "refused" when the scheduler did not take it
    reason: str = ""
    exit_code: int | None = None
    log_tail: str = ""  # the last lines of the job's stderr, when it has one
    scheduler: str = ""  # slurm, pbs, local: what a fix may suggest (a PBS site has no twin)

    def text(self) -> str:
        code = f", exit code {self.exit_code}" if self.exit_code not in (None, 0) else ""
        return f"{self.state}{code}" + (f": {self.reason}" if self.reason else "")


def setup_modules(setup: list[str]) -> list[str]:
    """The modules a profile's setup lines load (``module load|add A B``, ``ml A``), in order."""
    names: list[str] = []
    for line in setup:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if len(words) >= 3 and words[0] == "module" and words[1] in ("load", "add"):
            names += [w for w in words[2:] if not w.startswith("-")]
        elif len(words) >= 2 and words[0] == "ml" and words[1] not in _ML_COMMANDS:
            names += [w for w in words[1:] if not w.startswith("-")]
    return names


def _loaded(name: str, loaded: list[str]) -> bool:
    # `module load cuda` loads cuda/12.2 (the default version): a name matches itself or name/<version>.
    return any(m == name or m.startswith(name + "/") for m in loaded)


def _no_report(expected: Expected, job: JobEnd, wrote_logs: bool) -> list[Check]:
    """No report came back: say what is most likely, from whether the job wrote into the run dir."""
    ended = f"the job ended ({job.text()}) without a report"
    tail = f"; its stderr ends: {job.log_tail}" if job.log_tail else ""
    if job.state == "refused":
        # A PBS site has no Slurm twin (issue 53): its rehearsal runs the scripts through the emulator.
        how = ("`orch sites rehearsal SITE` renders and submits its scripts through the PBS emulator"
               if job.scheduler == "pbs" else "`orch sites check SITE` on a twin")
        first = Check("python", False, None, f"the scheduler did not take the probe: {job.reason}",
                      f"make the profile's queue, account and resources acceptable to the site ({how}) "
                      "and probe again")
        visible = Check("run_dir_visible", False, None, "not found out: the job never ran")
    elif wrote_logs and "No module named 'torch'" in job.log_tail:
        # The launcher itself needed torch (torchrun is torch.distributed.run): Python ran, torch did not.
        first = Check("python", True, None, f"the job's Python started, then failed to import torch{tail}")
        visible = Check("run_dir_visible", True, None, "the job wrote its logs into the run directory")
        torch = Check("torch", False, "absent", f"{ended}: the job's Python ({expected.python}) cannot import torch",
                      _FIX_TORCH.format(exe=expected.python))
        rest = [Check(name, False, None, "not found out: no report") for name in CHECKS
                if name not in ("python", "run_dir_visible", "torch")]
        by_name = {c.name: c for c in [first, visible, torch, *rest]}
        return [by_name[name] for name in CHECKS]
    elif wrote_logs:
        first = Check("python", False, None, f"{ended}{tail}",
                      f"the job's own words are in {expected.stderr}: check the profile's python: "
                      f"({expected.python}) and setup: lines, which the job ran before Python")
        visible = Check("run_dir_visible", True, None, "the job wrote its logs into the run directory")
    else:
        first = Check("python", False, None, f"{ended} and wrote nothing into {expected.run_dir}",
                      "the job could not reach the run directory (or never started): " + FIX_SHARED_FS)
        visible = Check("run_dir_visible", False, False,
                        f"no stdout.log or stderr.log in {expected.run_dir}: the node most likely does not see it",
                        FIX_SHARED_FS)
    rest = [Check(name, False, None, "not found out: no report") for name in CHECKS
            if name not in ("python", "run_dir_visible")]
    by_name = {c.name: c for c in [first, visible, *rest]}
    return [by_name[name] for name in CHECKS]


def judge(report: dict[str, Any] | None, expected: Expected, job: JobEnd, wrote_logs: bool) -> list[Check]:
    """Every check of :data:`CHECKS`, in that order."""
    if not report:
        return _no_report(expected, job, wrote_logs)
    python = report.get("python") or {}
    exe = python.get("executable") or "?"
    checks = [Check("python", True, f"{python.get('version')} {exe}",
                    f"Python {python.get('version')} at {exe}")]
    torch, torch_error = report.get("torch"), report.get("torch_error")
    checks.append(Check("torch", True, torch, f"torch {torch}") if torch else Check(
        "torch", False, "absent", f"{exe} cannot import torch ({torch_error})", _FIX_TORCH.format(exe=exe)))
    checks.append(_deepspeed(report, exe))
    checks.append(_devices(report, expected))
    checks.append(_allreduce(report, expected))
    checks.append(_nodes(report, expected))
    checks.append(_run_dir(report, expected))
    checks.append(_modules(report, expected))
    return checks


def _deepspeed(report: dict[str, Any], exe: str) -> Check:
    version, error = report.get("deepspeed"), report.get("deepspeed_error") or ""
    if version:
        return Check("deepspeed", True, version, f"DeepSpeed {version}")
    if not report.get("torch") or "No module named 'deepspeed'" in error or error.startswith("not tried"):
        # Optional: only the DeepSpeed strategies need it, and they say so when a run starts.
        return Check("deepspeed", True, "absent", "not installed (only the deepspeed strategies need it)"
                     if report.get("torch") else "not tried: it needs torch")
    return Check("deepspeed", False, "broken", f"DeepSpeed is installed but does not import: {error}",
                 f"reinstall DeepSpeed for {exe} against its torch, or uninstall it")


def _devices(report: dict[str, Any], expected: Expected) -> Check:
    devices = report.get("devices") or {}
    kind, count, names = devices.get("type"), int(devices.get("count") or 0), devices.get("names") or []
    value = f"{count} x {kind}" + (f": {', '.join(dict.fromkeys(names))}" if names else "")
    if not report.get("torch"):
        return Check("devices", False, None, "not looked for: torch cannot be imported")
    if devices.get("error") or count < 1 or kind != expected.device_type:
        return Check("devices", False, value,
                     f"the profile's device type is {expected.device_type}; rank 0 sees {value}"
                     + (f" ({devices['error']})" if devices.get("error") else ""),
                     f"ask for the {expected.device_type} devices in the profile's resources and load what "
                     f"drives them in setup:, with a PyTorch built for {expected.device_type}")
    return Check("devices", True, value, f"rank 0 sees {value}")


def _allreduce(report: dict[str, Any], expected: Expected) -> Check:
    ar = report.get("allreduce") or {}
    ranks = ar.get("ranks")
    if not report.get("torch"):
        return Check("allreduce", False, None, "not run: torch cannot be imported")
    if not ar.get("ok") and (report.get("devices") or {}).get("error"):
        return Check("allreduce", False, None, f"not run: {ar.get('error')} (see devices)")
    if not ar.get("ok"):
        return Check("allreduce", False, None,
                     f"{ar.get('backend') or expected.backend} all-reduce over {ranks or expected.ranks} rank(s) "
                     f"failed: {ar.get('error')}",
                     "check that the launcher (launcher:) starts every rank, that the ranks reach the first host "
                     "(MASTER_ADDR; the network interface, e.g. NCCL_SOCKET_IFNAME in env:) and that this PyTorch "
                     f"has the {expected.backend} backend")
    gbs = float(ar.get("busbw_gbs") or 0.0)
    detail = f"busbw {gbs:.3g} GB/s over {ranks} rank(s), {ar.get('backend')}"
    if ranks != expected.ranks:
        return Check("allreduce", False, gbs, f"{detail}: {expected.ranks} rank(s) were asked for",
                     "the launcher started another number of processes than the run asks for: check launcher: "
                     "and its args")
    return Check("allreduce", True, gbs, detail)


def _nodes(report: dict[str, Any], expected: Expected) -> Check:
    nodes = list(report.get("nodes") or [])
    if not (report.get("allreduce") or {}).get("ok") and len(nodes) < expected.nodes:
        return Check("nodes", False, None, "not found out: the ranks did not meet (see allreduce)")
    text = f"{len(nodes)} node(s): {' '.join(nodes)}"
    if len(nodes) != expected.nodes:
        return Check("nodes", False, len(nodes), f"{text}; {expected.nodes} were asked for",
                     "the ranks did not spread over the allocation: check launcher: and its args")
    return Check("nodes", True, len(nodes), text)


def _run_dir(report: dict[str, Any], expected: Expected) -> Check:
    seen = report.get("run_dir") or {}
    token = seen.get("token")
    if token == expected.token:
        return Check("run_dir_visible", True, True, f"the node read orch's marker in {expected.run_dir}")
    why = seen.get("error") or ("another token (an older probe's directory?)" if token else "an empty file")
    return Check("run_dir_visible", False, False,
                 f"the node read {seen.get('path')}: {why}; orch wrote its marker into {expected.run_dir}",
                 FIX_SHARED_FS)


def _modules(report: dict[str, Any], expected: Expected) -> Check:
    loaded = list(report.get("modules") or [])
    missing = [m for m in expected.modules if not _loaded(m, loaded)]
    value = " ".join(loaded)
    if missing:
        return Check("modules", False, value,
                     f"setup: loads {' '.join(missing)}, which $LOADEDMODULES on the node lacks "
                     f"({value or 'no module loaded'})",
                     "check the module names (`module avail NAME` on a compute node) and that no later setup "
                     "line unloads them")
    return Check("modules", True, value, f"loaded: {value}" if loaded else "no module loaded (setup: loads none)")
