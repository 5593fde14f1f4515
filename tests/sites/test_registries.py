"""Registries (orchestrator/registry.py): launchers, vendor runners, schedulers and their executors,
workloads. Registration is explicit (a decorator), a name is taken once, a lookup lists every valid
name; executor and launcher options are typed, and a profile with an unknown scheduler, launcher,
option or choice is refused when it loads, on one line naming the file, the line and the field."""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.errors import SourceError, UserError
from orchestrator.registry import DuplicateName, Registry, UnknownName
from orchestrator.run.executors import EXECUTORS, executor_for
from orchestrator.run.executors.local import LocalExecutor
from orchestrator.sites.launcher_options import LAUNCHER_OPTIONS
from orchestrator.sites.launchers import LAUNCHERS, LaunchRequest, TorchrunLauncher, get_launcher
from orchestrator.sites.profiles import available_sites, load_site
from orchestrator.sites.schedulers import SCHEDULERS, SlurmOptions
from orchestrator.sites.vendors.base import runners
from tests.conftest import REPO, run_orch, write
from workloads import registry as workloads

ORCH_LAUNCHERS = {"python", "single", "torchrun", "srun", "mpiexec", "mpirun", "deepspeed", "gaudi_spawn"}
VENDOR_RUNNERS = {"cerebras", "sambaflow", "poptorch", "groqflow"}
SLURM_OPTIONS = "array_parallelism, find_window_days, max_array_size, max_queued_jobs, squeue_fallback"

SITE = """\
name: x
description: a site of the tests
scheduler: {scheduler}
max_nodes: 1
device: {{type: cpu, model: host-cpu, per_node: 1, precisions: [fp32]}}
queues:
  - name: q
    max_nodes: 1
    max_walltime: "01:00:00"
launcher:
  name: {launcher}
  options:
    {option}
executor:
  {executor}
"""


def site_file(tmp_path: Path, scheduler: str = "slurm", launcher: str = "srun", option: str = "{}",
              executor: str = "{}") -> Path:
    text = SITE.format(scheduler=scheduler, launcher=launcher, option=option, executor=executor)
    # "options:\n    {}" is not YAML: an empty mapping is written on the key's line.
    text = text.replace("options:\n    {}", "options: {}").replace("executor:\n  {}", "executor: {}")
    return write(tmp_path / "sites" / "x.yaml", text)


def refusal(tmp_path: Path, **site: str) -> SourceError:
    """The error loading the profile raises, loaded as `orch --sites-dir DIR sites show x` loads it."""
    path = site_file(tmp_path, **site)
    with pytest.raises(SourceError) as caught:
        load_site("x", [path.parent])
    assert "\n" not in str(caught.value)
    return caught.value


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ------------------------------------------------------------------------------ the registry itself

def test_a_name_is_registered_once_and_explicitly() -> None:
    things: Registry[type] = Registry("thing", name_attr="name")

    @things.register("a")
    class A:
        name = ""

    assert things.get("a") is A and A.name == "a" and things.names() == ["a"] and list(things) == ["a"]
    with pytest.raises(DuplicateName, match=r"^thing 'a' registered twice: .*\.A and .*\.B$"):
        @things.register("a")
        class B:
            pass
    with pytest.raises(DuplicateName, match="empty name"):
        things.register("")(type("C", (), {}))
    assert things.get("a") is A  # the refused entry replaced nothing

    class D(A):  # a subclass without the decorator is not registered, and replaces nothing
        pass

    assert things.names() == ["a"] and things.get("a") is A


def test_an_unknown_name_lists_every_valid_one_sorted() -> None:
    things: Registry[int] = Registry("thing")
    for name in ("b", "c", "a"):
        things.add(name, 1)
    with pytest.raises(UnknownName) as caught:
        things.get("z")
    assert str(caught.value) == "unknown thing 'z' (known: a, b, c)"
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, UserError)


def test_modules_are_imported_before_a_lookup_but_not_the_one_running_as_main(
        monkeypatch: pytest.MonkeyPatch) -> None:
    imported: list[str] = []
    monkeypatch.setattr("importlib.import_module", lambda name: imported.append(name))
    running = types.ModuleType("__main__")
    running.__spec__ = types.SimpleNamespace(name="pkg.running")  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", running)
    things: Registry[int] = Registry("thing", modules=("pkg.one", "pkg.running", "pkg.two"))
    assert imported == []  # nothing at construction
    assert "x" not in things and imported == ["pkg.one", "pkg.two"]
    things.names()
    assert imported == ["pkg.one", "pkg.two"]  # once


def test_a_fresh_process_lists_every_launcher_and_executor() -> None:
    """The lookups import their backends first: never "(known: )" (the vendor runners and the
    executors live in modules nothing else had imported), and launchers.py imports no vendor module."""
    code = (
        "import sys\n"
        "from orchestrator.sites.launchers import get_launcher\n"
        "assert not [m for m in sys.modules if m.startswith('orchestrator.sites.vendors.')], 'imported early'\n"
        "from orchestrator.run.executors import executor_for\n"
        "for ask in (lambda: get_launcher('nope'), lambda: executor_for('nope', '.')):\n"
        "    try:\n"
        "        ask()\n"
        "    except KeyError as exc:\n"
        "        print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    launchers, schedulers = out.splitlines()
    assert launchers == f"unknown launcher 'nope' (known: {', '.join(sorted(ORCH_LAUNCHERS | VENDOR_RUNNERS))})"
    assert schedulers == "unknown scheduler 'nope' (known: appliance, local, pbs, slurm)"


# ------------------------------------------------------------------------------ what is registered

def test_every_launcher_scheduler_and_workload_is_listed() -> None:
    assert set(LAUNCHERS.names()) == ORCH_LAUNCHERS | VENDOR_RUNNERS
    assert set(runners()) == VENDOR_RUNNERS
    assert SCHEDULERS.names() == ["appliance", "local", "pbs", "slurm"]
    assert workloads.names() == sorted(workloads.WORKLOADS) and {"gemm", "gpt2"} <= set(workloads.names())
    for name in LAUNCHERS:
        assert get_launcher(name).name == name


def test_one_list_of_names_for_launchers_and_for_schedulers() -> None:
    """Each launcher has an options model, each scheduler an executor, under the same names."""
    assert LAUNCHERS.names() == LAUNCHER_OPTIONS.names()
    assert EXECUTORS.names() == SCHEDULERS.names()
    for name, cls in EXECUTORS.items():
        assert cls.scheduler == name and cls.options_model is SCHEDULERS.get(name)


def test_a_second_launcher_executor_or_workload_of_a_name_is_refused() -> None:
    class MyTorchrun(TorchrunLauncher):  # not decorated: torchrun is still torchrun
        pass

    assert LAUNCHERS.get("torchrun") is TorchrunLauncher
    with pytest.raises(DuplicateName, match=r"launcher 'torchrun' registered twice: "
                                            r"orchestrator\.sites\.launchers\.TorchrunLauncher and .*MyTorchrun"):
        LAUNCHERS.register("torchrun")(MyTorchrun)
    assert LAUNCHERS.get("torchrun") is TorchrunLauncher
    with pytest.raises(DuplicateName, match="scheduler 'local' registered twice"):
        EXECUTORS.register("local")(type("MyLocal", (LocalExecutor,), {}))
    assert EXECUTORS.get("local") is LocalExecutor
    gemm = workloads.get("gemm")
    with pytest.raises(ValueError, match="workload 'gemm' registered twice: workloads.gemm and mine.gemm"):
        workloads.register(replace(gemm, module="mine.gemm"))
    assert workloads.get("gemm") is gemm
    with pytest.raises(KeyError, match=r"unknown workload 'nope' \(known: .*gemm"):
        workloads.get("nope")


# ------------------------------------------------------------------------------ typed options

def test_executors_read_typed_options(tmp_path: Path) -> None:
    slurm = executor_for("slurm", tmp_path / "s", {"squeue_fallback": False, "max_queued_jobs": 3})
    assert isinstance(slurm.options, SlurmOptions)
    assert (slurm.options.squeue_fallback, slurm.options.max_queued_jobs, slurm.options.find_window_days) == (
        False, 3, 30)
    assert executor_for("slurm", tmp_path / "s2").options == SlurmOptions.model_validate({"squeue_fallback": True})
    with pytest.raises(UserError) as caught:
        executor_for("slurm", tmp_path / "s3", {"max_queu_jobs": 3})
    assert str(caught.value) == (f"scheduler slurm options: unknown option 'max_queu_jobs' for scheduler slurm "
                                 f"(valid: {SLURM_OPTIONS})")
    appliance = executor_for("appliance", tmp_path / "a", {"cores": 2})
    assert isinstance(appliance, LocalExecutor) and appliance.capacity == 2
    for name, model in SCHEDULERS.items():  # every option says what it does
        assert model.__doc__
        for field_name, info in model.model_fields.items():
            assert info.description, f"{name}: {field_name} has no description"


def test_gaudi_spawn_refuses_an_unknown_mode_it_is_handed() -> None:
    req = LaunchRequest(python="py", module="workloads.gemm", args=[], nodes=1, tasks_per_node=8, extra_args=[],
                        options={"mode": "hccl"}, script="gemm.py")
    assert get_launcher("gaudi_spawn").check(req) == "launcher gaudi_spawn: unknown mode 'hccl' (valid: mpi, deepspeed)"


# ------------------------------------------------------------------------------ refused at profile load

def test_an_unknown_executor_option_is_refused_at_load(tmp_path: Path) -> None:
    err = refusal(tmp_path, executor="max_queu_jobs: 5")
    path = tmp_path / "sites" / "x.yaml"
    assert str(err) == (f"{path}:{line_of(path, 'max_queu_jobs')}: executor: unknown option 'max_queu_jobs' "
                        f"for scheduler slurm (valid: {SLURM_OPTIONS})")
    err = refusal(tmp_path, scheduler="pbs", executor="squeue_fallback: false")  # Slurm's, not PBS's
    assert ("executor: unknown option 'squeue_fallback' for scheduler pbs (valid: commands_dir, max_array_size, "
            in str(err))
    err = refusal(tmp_path, executor="max_queued_jobs: many")
    assert f"x.yaml:{line_of(path, 'many')}: executor.max_queued_jobs: Input should be a valid integer" in str(err)
    err = refusal(tmp_path, scheduler="local", launcher="python", executor="cores: 0")
    assert "executor.cores: expected a whole number of cores >= 1, got 0" in str(err)


def test_an_unknown_launcher_option_is_refused_at_load(tmp_path: Path) -> None:
    err = refusal(tmp_path, launcher="torchrun", option="vai: srun")
    path = tmp_path / "sites" / "x.yaml"
    assert str(err) == (f"{path}:{line_of(path, 'vai:')}: launcher.options: unknown option 'vai' for launcher "
                        "torchrun (valid: via)")
    err = refusal(tmp_path, launcher="srun", option="via: srun")
    assert "launcher.options: unknown option 'via' for launcher srun (valid: none: launcher srun takes no options)" \
        in str(err)
    err = refusal(tmp_path, launcher="poptorch", option="data_dir: {resnet50: /data}")
    assert "unknown option 'data_dir' for launcher poptorch (valid: data_dirs, device_model, examples, " \
           "resnet_epochs)" in str(err)


def test_an_unknown_gaudi_spawn_mode_is_refused_at_load(tmp_path: Path) -> None:
    err = refusal(tmp_path, launcher="gaudi_spawn", option="mode: hccl")
    path = tmp_path / "sites" / "x.yaml"
    assert str(err) == (f"{path}:{line_of(path, 'mode: hccl')}: launcher.options.mode: Input should be 'mpi' or "
                        "'deepspeed', got 'hccl'")
    site_file(tmp_path, launcher="gaudi_spawn", option="{mode: deepspeed, program: /m/gaudi_spawn.py}")
    assert load_site("x", [tmp_path / "sites"]).launcher.options == {"mode": "deepspeed",
                                                                      "program": "/m/gaudi_spawn.py"}


def test_an_unknown_scheduler_or_launcher_is_refused_at_load(tmp_path: Path) -> None:
    err = refusal(tmp_path, scheduler="slrum")
    assert str(err) == f"{tmp_path / 'sites' / 'x.yaml'}:3: scheduler: unknown scheduler 'slrum' " \
                       "(valid: appliance, local, pbs, slurm)"
    err = refusal(tmp_path, launcher="mpiexce")
    assert str(err) == (f"{tmp_path / 'sites' / 'x.yaml'}:11: launcher.name: unknown launcher 'mpiexce' (valid: "
                        f"{', '.join(sorted(ORCH_LAUNCHERS | VENDOR_RUNNERS))})")


def test_a_system_override_is_refused_at_its_own_line(tmp_path: Path) -> None:
    path = site_file(tmp_path)
    path.write_text(path.read_text() + "systems:\n  big:\n    launcher:\n      name: torchrun\n"
                                       "      options: {via: mpirun}\n")
    assert load_site("x", [path.parent]).launcher.name == "srun"
    with pytest.raises(SourceError) as caught:
        load_site("x:big", [path.parent])
    assert str(caught.value) == (f"{path}:{line_of(path, 'via: mpirun')}: systems.big.launcher.options.via: "
                                 "Input should be 'srun' or 'mpiexec', got 'mpirun'")


def test_the_cli_says_it_on_one_line(tmp_path: Path, workdir: Path) -> None:
    """`orch --sites-dir DIR sites show x`: the one-line message with the valid names, no traceback,
    the exit code of a user's mistake (errors.UserError.exit_code)."""
    path = site_file(tmp_path, executor="max_queu_jobs: 5")
    proc = run_orch("--sites-dir", str(path.parent), "sites", "show", "x", cwd=workdir)
    assert proc.returncode == UserError.exit_code and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == (f"error: {path}:{line_of(path, 'max_queu_jobs')}: executor: unknown option "
                                   f"'max_queu_jobs' for scheduler slurm (valid: {SLURM_OPTIONS})")
    site_file(tmp_path, launcher="gaudi_spawn", option="mode: hccl")
    proc = run_orch("--sites-dir", str(path.parent), "sites", "show", "x", cwd=workdir)
    assert proc.returncode == UserError.exit_code and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "launcher.options.mode: Input should be 'mpi' or 'deepspeed', got 'hccl'" in proc.stderr


# ------------------------------------------------------------------------------ the seed profiles

def test_every_seed_profile_still_loads(tmp_path: Path) -> None:
    seeds = sorted(p.stem for p in (REPO / "sites").glob("*.yaml"))
    assert seeds and set(seeds) <= set(available_sites())
    for name in seeds:
        for target in [name, *(f"{name}:{system}" for system in load_site(name).systems)]:
            profile = load_site(target)
            assert profile.scheduler in SCHEDULERS and profile.launcher.name in LAUNCHERS
            executor = executor_for(profile.scheduler, tmp_path / target.replace(":", "-"), profile.executor)
            assert executor.options == SCHEDULERS.get(profile.scheduler).model_validate(profile.executor)
