"""Plan-time lints (orchestrator/plan/lints.py): each check on a profile or sweep written here that
triggers it, naming the file, line and field of the value at fault, and one beside it that does not.

Profile checks run on profiles loaded from a sites directory in tmp (as --sites-dir adds them);
the node-local check plans for real (orchestrator.plan.record.plan_sweep); the walltime check runs
the CLI, as warn (planned, warning printed and in --json) and as skip (skipped with both figures).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import paths
from orchestrator.plan.expand import expand
from orchestrator.plan.lints import LINTS, Lint, SiteUse, lint_plan, lint_sites, node_local_root
from orchestrator.plan.record import plan_sweep
from orchestrator.plan.sweep import parse_sweep
from orchestrator.sites.profiles import load_site
from tests.conftest import run_orch, write


@pytest.fixture(autouse=True)
def shared_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clone running these tests may itself sit under /tmp (CI's, a fresh clone's): in-process
    lints see a checkout on shared storage unless a test says otherwise."""
    monkeypatch.setattr(paths, "workloads_root", lambda: Path("/home/me/orch"))


SLURM_SITE = """\
name: {name}
scheduler: slurm
max_nodes: 2
device:
  type: cuda
  model: A100-SXM4-40GB
  per_node: 4
  memory_gb: 40
  peak_tflops: {{fp32: 19.5}}
  precisions: [fp32]
queues:
  - name: gpu
    max_nodes: 2
    max_walltime: "24:00:00"
launcher:
  name: srun
"""


def site_file(directory: Path, name: str, text: str) -> Path:
    return write(directory / f"{name}.yaml", text)


def lints_of(directory: Path, target: str, check: str | None = None) -> list[Lint]:
    """The lints of one site's profile (loaded from ``directory``), optionally of one check."""
    profile = load_site(target, [directory])
    found = lint_sites([SiteUse(profile)])
    return [lint for lint in found if check is None or lint.check == check]


def line_of(path: Path, text: str) -> int:
    """1-based line of the first line of ``path`` holding ``text``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_the_checks_are_registered_by_name() -> None:
    assert LINTS.names() == ["conda-hook", "nccl-plugin", "node-local-runs", "over-walltime", "relative-path"]


# ---------------------------------------------------------------- relative-path

CEREBRAS = """\
name: vend
scheduler: appliance
device: {type: wse, model: CS-2, per_node: 1, precisions: [bf16]}
queues:
  - {name: appliance, implicit: true, max_nodes: 1, max_walltime: "24:00:00"}
launcher:
  name: cerebras
  options:
    modelzoo: modelzoo
    model_dir: model_dir
    compile_dir: compile_dir
    mount_dirs: [/home/, data]
    python_paths:
      - ~/modelzoo/src
"""


def test_relative_vendor_paths_name_file_line_and_field(tmp_path: Path) -> None:
    path = site_file(tmp_path, "vend", CEREBRAS)
    found = {lint.field: lint for lint in lints_of(tmp_path, "vend", "relative-path")}
    # model_dir is the run's own output, compile_dir a path on the appliance's side: not flagged.
    assert set(found) == {"launcher.options.modelzoo", "launcher.options.mount_dirs[1]",
                          "launcher.options.python_paths[0]"}
    zoo = found["launcher.options.modelzoo"]
    assert (zoo.path, zoo.line, zoo.site, zoo.severity) == (str(path), line_of(path, "modelzoo: modelzoo"),
                                                            "vend", "warning")
    assert zoo.text().startswith(f"warning: {path}:{zoo.line} launcher.options.modelzoo: 'modelzoo' is relative")
    assert "run directory" in zoo.message and "absolute path" in zoo.message
    assert found["launcher.options.mount_dirs[1]"].line == line_of(path, "mount_dirs:")
    home = found["launcher.options.python_paths[0]"]
    assert home.line == line_of(path, "~/modelzoo/src") and "not expanded" in home.message


def test_a_systems_override_is_named_where_it_is_written(tmp_path: Path) -> None:
    path = site_file(tmp_path, "vend", CEREBRAS.replace("modelzoo: modelzoo", "modelzoo: /home/me/modelzoo")
                     .replace("[/home/, data]", "[/home/]").replace("~/modelzoo/src", "/home/me/modelzoo/src") + """\
systems:
  groq:
    launcher:
      name: groqflow
      options:
        groqflow: groqflow
""")
    assert lints_of(tmp_path, "vend", "relative-path") == []
    (lint,) = lints_of(tmp_path, "vend:groq", "relative-path")
    assert (lint.site, lint.field, lint.line) == ("vend:groq", "systems.groq.launcher.options.groqflow",
                                                  line_of(path, "groqflow: groqflow"))


def test_a_relative_default_is_named_at_the_options(tmp_path: Path) -> None:
    path = site_file(tmp_path, "gaudi", SLURM_SITE.format(name="gaudi").replace(
        "  name: srun\n", "  name: gaudi_spawn\n  options:\n    mode: mpi\n"))
    (lint,) = lints_of(tmp_path, "gaudi", "relative-path")
    assert lint.field == "launcher.options.program" and lint.line == line_of(path, "options:")
    assert "default" in lint.message and "'gaudi_spawn.py' is relative" in lint.message
    site_file(tmp_path, "gaudi", SLURM_SITE.format(name="gaudi").replace(
        "  name: srun\n", "  name: gaudi_spawn\n  options:\n    program: /opt/habana/gaudi_spawn.py\n"))
    assert lints_of(tmp_path, "gaudi", "relative-path") == []


# ---------------------------------------------------------------- conda-hook

@pytest.mark.parametrize("setup, flagged, says", [
    (["module load cuda", "conda activate myenv"], 1, "a batch job's shell lacks"),
    (["source ~/miniconda3/etc/profile.d/conda.sh", "conda activate myenv"], 1, "with `~` or `$`"),
    (['eval "$(conda shell.bash hook)"', "conda activate myenv"], 1, "eval runs the hook's output"),
    (["module load Anaconda3", "conda activate myenv"], 1, "a batch job's shell lacks"),
    (["conda activate myenv", "source /opt/conda/etc/profile.d/conda.sh"], 0, "a batch job's shell lacks"),
    (["source /opt/conda/etc/profile.d/conda.sh", "conda activate myenv"], None, ""),
    ([". /opt/conda/etc/profile.d/conda.sh", "conda activate"], None, ""),
    (["module use /soft/modulefiles", "module load conda", "conda activate"], None, ""),
    (["module load conda/2024-10-30", "conda activate base"], None, ""),
    (["module load Anaconda3", "source activate myenv"], None, ""),
])
def test_conda_activate_needs_the_hook_first(tmp_path: Path, setup: list[str], flagged: int | None,
                                             says: str) -> None:
    lines = "".join(f"  - {json.dumps(line)}\n" for line in setup)
    path = site_file(tmp_path, "condasite", SLURM_SITE.format(name="condasite") + "setup:\n" + lines)
    found = lints_of(tmp_path, "condasite", "conda-hook")
    if flagged is None:
        assert found == []
        return
    (lint,) = found
    assert lint.field == f"setup[{flagged}]" and lint.path == str(path)
    assert lint.line == line_of(path, json.dumps(setup[flagged]))
    assert says in lint.message and "profile.d/conda.sh" in lint.message
    assert lint.text().startswith(f"warning: {path}:{lint.line} setup[{flagged}]: `conda activate`")


# ---------------------------------------------------------------- nccl-plugin

@pytest.mark.parametrize("env, setup, flagged", [
    ({"NCCL_NET": "AWS Libfabric"}, [], True),
    ({"NCCL_NET": "OFI"}, ["module load cuda"], True),
    ({"NCCL_NET": "AWS Libfabric"}, ["module use /soft/modulefiles", "module load conda/2022-09-08"], True),
    ({"NCCL_NET": "AWS Libfabric"}, ["module load conda"], True),  # not ALCF's module tree
    ({"NCCL_NET": "AWS Libfabric"}, ["module use /soft/modulefiles", "module load conda"], False),
    ({"NCCL_NET": "AWS Libfabric"}, ["module load aws-ofi-nccl/1.9.1"], False),
    ({"NCCL_NET": "AWS Libfabric", "LD_LIBRARY_PATH": "/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"}, [], False),
    ({"NCCL_NET": "AWS Libfabric", "NCCL_NET_PLUGIN": "ofi"}, [], False),
    ({"NCCL_NET": "IB"}, [], False),
    ({"NCCL_NET": "Socket"}, [], False),
    ({"NCCL_DEBUG": "WARN"}, [], False),
])
def test_a_forced_nccl_net_needs_its_plugin(tmp_path: Path, env: dict[str, str], setup: list[str],
                                            flagged: bool) -> None:
    text = SLURM_SITE.format(name="ncclsite") + "env:\n" + "".join(
        f"  {k}: {json.dumps(v)}\n" for k, v in env.items())
    text += ("setup:\n" + "".join(f"  - {json.dumps(line)}\n" for line in setup)) if setup else ""
    path = site_file(tmp_path, "ncclsite", text)
    found = lints_of(tmp_path, "ncclsite", "nccl-plugin")
    assert bool(found) == flagged
    if flagged:
        (lint,) = found
        assert (lint.path, lint.line, lint.field) == (str(path), line_of(path, "NCCL_NET:"), "env.NCCL_NET")
        assert f"NCCL_NET '{env['NCCL_NET']}'" in lint.message and "LD_LIBRARY_PATH" in lint.message


def test_a_merged_env_key_is_named_where_the_site_writes_it(tmp_path: Path) -> None:
    """A system's env merges key by key: NCCL_NET from the site is located at the site's line."""
    path = site_file(tmp_path, "ncclsite", SLURM_SITE.format(name="ncclsite")
                     + "env:\n  NCCL_NET: OFI\nsystems:\n  big:\n    env:\n      NCCL_DEBUG: INFO\n")
    (lint,) = lints_of(tmp_path, "ncclsite:big", "nccl-plugin")
    assert (lint.site, lint.field, lint.line) == ("ncclsite:big", "env.NCCL_NET", line_of(path, "NCCL_NET: OFI"))


# ---------------------------------------------------------------- node-local-runs

SWEEP = """\
name: lints
experiments:
  - name: g
    workload: gemm
    sites: [{sites}]
    walltime: "00:10:00"
    grid: {{devices: 1, precision: fp32, m: 64, n: 64, k: 64}}
"""


def plan(tmp_path: Path, sites: str, runs_root: Path, sites_dir: Path) -> list[Lint]:
    loaded = parse_sweep(write(tmp_path / "sweep.yaml", SWEEP.format(sites=sites)))
    plans = plan_sweep(loaded, runs_root, env={}, sites_dirs=[sites_dir])
    return lint_plan(plans, loaded)


def test_run_directories_on_node_local_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))  # this test's own "node-local" directory
    monkeypatch.setattr(paths, "workloads_root", lambda: Path("/home/me/orch"))  # a shared checkout
    sites = tmp_path / "sites"
    path = site_file(sites, "cluster", SLURM_SITE.format(name="cluster"))
    runs_root = tmp_path / "scratch" / ".orch" / "runs"
    (lint,) = [x for x in plan(tmp_path, "cluster, sandbox, local", runs_root, sites) if x.check == "node-local-runs"]
    assert (lint.site, lint.path, lint.line, lint.field) == ("cluster", str(path), line_of(path, "scheduler:"),
                                                              "scheduler")
    assert str(runs_root) in lint.message and "ORCH_HOME" in lint.message and "node_local_ok" in lint.message


def test_a_checkout_on_node_local_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs import workloads from the checkout: cloned under /tmp, no compute node can."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    monkeypatch.setattr(paths, "workloads_root", lambda: tmp_path / "scratch" / "orch")
    sites = tmp_path / "sites"
    site_file(sites, "cluster", SLURM_SITE.format(name="cluster"))
    found = [x for x in plan(tmp_path, "cluster, sandbox, local", tmp_path / "shared" / "runs", sites)
             if x.check == "node-local-runs" and "clone orch" in x.message]  # (tmp_path is under /tmp too)
    assert [x.site for x in found] == ["cluster"]  # the sandbox's nodes and local share this host
    assert str(tmp_path / "scratch" / "orch") in found[0].message
    assert "clone orch on a file system the nodes share" in found[0].message


def test_node_local_roots() -> None:
    assert node_local_root("/tmp/x/.orch/runs") == Path("/tmp")
    assert node_local_root("/dev/shm/orch") == Path("/dev/shm")
    assert node_local_root("/home/me/.orch/runs") is None


def test_a_site_whose_nodes_share_this_host_is_exempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    sites = tmp_path / "sites"
    site_file(sites, "cluster", SLURM_SITE.format(name="cluster").replace("max_nodes: 2\n", "max_nodes: 2\n"
                                                                          "node_local_ok: true\n", 1))
    assert not [x for x in plan(tmp_path, "cluster", tmp_path / "scratch" / "runs", sites)
                if x.check == "node-local-runs"]


# ---------------------------------------------------------------- over-walltime (through the CLI)

WALLTIME_SWEEP = """\
name: long
{option}experiments:
  - name: big-gemm
    workload: gemm
    sites: [cluster]
    walltime: "00:01:00"
    grid:
      devices: 1
      precision: fp32
      m: 4096
      n: 4096
      k: 4096
      iters: 20000
"""


def plan_cli(workdir: Path, option: str) -> tuple[dict, str]:
    sites = workdir / "mysites"
    site_file(sites, "cluster", SLURM_SITE.format(name="cluster") + "node_local_ok: true\n")
    sweep = write(workdir / "long.yaml", WALLTIME_SWEEP.format(option=option))
    proc = run_orch("--sites-dir", str(sites), "plan", str(sweep), "--dry-run", "--json", cwd=workdir,
                    env={"ORCH_HOME": str(workdir / "state")}, check=True)
    return json.loads(proc.stdout), proc.stderr


def test_a_run_predicted_past_its_walltime_is_planned_with_a_warning(workdir: Path) -> None:
    out, stderr = plan_cli(workdir, "")
    (run,) = out["runs"]
    assert run["status"] == "planned" and run["run_s"] > 60
    (warning,) = out["warnings"]
    sweep = workdir / "long.yaml"
    assert warning["check"] == "over-walltime" and warning["site"] == "cluster"
    assert (warning["path"], warning["line"], warning["field"]) == (str(sweep), line_of(sweep, "walltime:"),
                                                                    "experiments[0].walltime")
    # run_s in the listing is rounded to 3 figures: the message has the prediction itself
    assert re.search(r"predicted 4m1\ds > walltime 1m00s", warning["message"]), warning["message"]
    assert "over_walltime: skip" in warning["message"]
    # on stderr the file is named relative to the working directory
    assert f"warning: long.yaml:{warning['line']} experiments[0].walltime: 1 run of experiment big-gemm" in stderr


def test_over_walltime_skip_skips_the_run_with_both_figures(workdir: Path) -> None:
    out, stderr = plan_cli(workdir, "over_walltime: skip\n")
    (run,) = out["runs"]
    assert run["status"] == "skipped" and out["warnings"] == [] and "warning:" not in stderr
    assert re.fullmatch(r"predicted 4m1\ds > walltime 1m00s; raise walltime: or set over_walltime: warn",
                        run["reason"]), run["reason"]
    assert run["run_s"] > 60  # the skipped run keeps its prediction


def test_an_experiment_s_over_walltime_wins_and_bad_values_are_located(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", WALLTIME_SWEEP.format(option="over_walltime: skip\n").replace(
        "    workload: gemm\n", "    workload: gemm\n    over_walltime: warn\n"))
    loaded = parse_sweep(sweep)
    assert loaded.sweep.over_walltime == "skip" and loaded.sweep.experiments[0].over_walltime == "warn"
    assert {run.over_walltime for run in expand(loaded.sweep)} == {"warn"}
    write(sweep, WALLTIME_SWEEP.format(option="over_walltime: never\n"))
    proc = run_orch("plan", str(sweep), "--dry-run", cwd=workdir)
    # Reported with the sweep's other mistake (its site is unknown here): every error at once (issue 27).
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: 2 problems in {sweep}:\n  {sweep}:2: over_walltime: ")
    assert "'warn' or 'skip'" in proc.stderr


# ---------------------------------------------------------------- where a value came from

def test_data_dirs_are_checked_for_the_workloads_the_plan_runs(tmp_path: Path) -> None:
    site_file(tmp_path, "sn", SLURM_SITE.format(name="sn").replace(
        "  name: srun\n", "  name: sambaflow\n  options:\n    data_dirs: {gpt2: /data/ss1024, unet: unet-data}\n"))
    profile = load_site("sn", [tmp_path])
    assert [x.field for x in lint_sites([SiteUse(profile)])] == ["launcher.options.data_dirs.unet"]

    def run(workload: str) -> Any:  # what the check reads of a planned run
        return SimpleNamespace(spec=SimpleNamespace(workload=workload, experiment="e"),
                               resolved=SimpleNamespace(skipped=False, placement=None, predicted_run_s=None),
                               run_dir="/r/s/1")

    assert lint_sites([SiteUse(profile, [run("gpt2")])]) == []
    (lint,) = lint_sites([SiteUse(profile, [run("unet")])])
    assert "names /r/s/<run id>/unet-data" in lint.message


def test_a_sweep_s_site_overrides_are_named_in_the_sweep(tmp_path: Path) -> None:
    from orchestrator.plan.sweep import Sweep

    if "site_overrides" not in Sweep.model_fields:
        pytest.skip("this tree's sweeps have no site_overrides")
    sites = tmp_path / "sites"
    site_file(sites, "cluster", SLURM_SITE.format(name="cluster") + "node_local_ok: true\n")
    sweep = write(tmp_path / "sweep.yaml", SWEEP.format(sites="cluster") + (
        "    site_overrides:\n      cluster:\n        env:\n          NCCL_NET: OFI\n"))
    loaded = parse_sweep(sweep)
    (lint,) = lint_plan(plan_sweep(loaded, tmp_path / "runs", env={}, sites_dirs=[sites]), loaded)
    assert (lint.check, lint.path, lint.line) == ("nccl-plugin", str(sweep), line_of(sweep, "NCCL_NET: OFI"))
    assert lint.field == "experiments[0].site_overrides.cluster.env.NCCL_NET"


def test_orch_run_prints_the_lints_too(workdir: Path) -> None:
    """NCCL_NET means nothing to a CPU run (gloo): the run completes, the warning is printed."""
    local = (Path(__file__).resolve().parents[2] / "sites" / "local.yaml").read_text()
    path = site_file(workdir / "mysites", "mylocal", local.replace("name: local\n", "name: mylocal\n", 1)
                     + "env:\n  NCCL_NET: OFI\n")
    sweep = write(workdir / "s.yaml", SWEEP.format(sites="mylocal").replace("k: 64}", "k: 64, iters: 2, warmup: 1}"))
    proc = run_orch("--sites-dir", str(workdir / "mysites"), "run", str(sweep), "--interval", "0.5", cwd=workdir,
                    check=True)
    line = line_of(path, "NCCL_NET: OFI")
    assert f"warning: mysites/mylocal.yaml:{line} env.NCCL_NET: NCCL_NET 'OFI'" in proc.stderr
