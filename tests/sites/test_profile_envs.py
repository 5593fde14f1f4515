"""Each site profile owns its software environment (``python_env``): the batch script of every seed
profile gives the program the Python its centre documents, the profile cites where the lines come
from, a Python the user must name is asked for at plan time (the run is skipped, the variable named),
and a sweep's ``site_overrides`` change a site's setup, env and python_env without a copy of it.

The expected lines below are the centres' own (cited in each profile's ``python_env.source``), written
out here rather than derived from the profile, so that a profile drifting from its page fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.errors import SourceError, UserError
from orchestrator.plan.expand import RunSpec
from orchestrator.plan.record import PlannedRun, plan_sweep
from orchestrator.plan.render import RunFiles, python_env_lines, render_script
from orchestrator.plan.resolve import resolve
from orchestrator.plan.sweep import parse_sweep
from orchestrator.run.sitecheck import rehearsal_profile
from orchestrator.sites.profiles import PythonActivation, PythonEnv, SiteProfile, available_sites, load_site
from orchestrator.sites.vendors.base import check_case

HOOK = 'eval "$(conda shell.bash hook)"'
# What a plan reads from the user's environment: the account, $HOME (the documented locations of the
# AI Testbed's clones and environments), and the Python environments a user must name.
USER_ENVS = {"ORCH_COSMA8_VENV": "/cosma/home/dp000/user/venvs/torch-rocm",
             "ORCH_JADE2_VENV": "/jmain02/home/user/venvs/torch",
             "ORCH_PERLMUTTER_CONDA_ENV": "torch",
             "ORCH_DGX_VENV": "/home/user/venvs/torch",
             "ORCH_POD16_VENV": "/home/user/venvs/poptorch"}
ENV = {"ORCH_ACCOUNT": "proj", "ORCH_QOS": "qos", "HOME": "/home/user",
       "ORCH_POPLAR_SDK": "/opt/graphcore/poplar_sdk-3.3.0", **USER_ENVS}

# Per target, the lines that give the program its Python, in order (module lines, then the
# activation), as the centres' pages write them (see each profile's python_env.source).
BASKERVILLE = ["module purge", "module load baskerville", "module load bask-apps/live",
               "module load PyTorch/2.1.2-foss-2022b-CUDA-11.8.0"]
ALCF_CONDA = ["module use /soft/modulefiles", "module load conda", HOOK, "conda activate base"]
DAWN = ["module purge", "module load rhel9/default-dawn", "module load intelpython-conda/2025.0", HOOK,
        "conda activate pytorch-gpu-2.3.1"]
STANAGE = ["module load Anaconda3/2022.10", "module load cuDNN/8.9.2.26-CUDA-12.1.1", HOOK, "conda activate pytorch"]
COSMA8 = [f"source {USER_ENVS['ORCH_COSMA8_VENV']}/bin/activate"]
DGX = [f"source {USER_ENVS['ORCH_DGX_VENV']}/bin/activate"]
GAUDI = ["source /home/user/habanalabs-venv/bin/activate"]
EXPECTED: dict[str, list[str]] = {
    "polaris": ALCF_CONDA,
    "sophia": [". /etc/profile", *ALCF_CONDA], "sophia:bigmem": [". /etc/profile", *ALCF_CONDA],
    "baskerville": BASKERVILLE, "baskerville:a100_80": BASKERVILLE,
    "dawn": DAWN,
    "cosma8": COSMA8, "cosma8:mi100": COSMA8,
    "stanage": STANAGE, "stanage:a100": STANAGE,
    "jade2": [f"source {USER_ENVS['ORCH_JADE2_VENV']}/bin/activate"],
    "perlmutter": ["module load conda", HOOK, "conda activate torch"],
    "lumi": ["module use /appl/local/csc/modulefiles/", "module load pytorch/2.5"],
    "dgx": DGX, "dgx:h100": DGX, "dgx:a100_80": DGX, "dgx:h200": DGX, "dgx:b200": DGX,
    "gaudi2-cluster": GAUDI, "alcf-ai-testbed:gaudi": GAUDI,
    "graphcore-pod16": ["source /opt/graphcore/poplar_sdk-3.3.0/enable",
                        f"source {USER_ENVS['ORCH_POD16_VENV']}/bin/activate"],
    "alcf-ai-testbed": ["source /opt/sambaflow/apps/nlp/transformers_on_rdu/venv/bin/activate"],
    "alcf-ai-testbed:sambanova": ["source /opt/sambaflow/apps/nlp/transformers_on_rdu/venv/bin/activate"],
    "alcf-ai-testbed:graphcore": ["source /software/graphcore/poplar_sdk/3.3.0/enable",
                                  "source /home/user/venvs/graphcore/poptorch33_env/bin/activate"],
    "alcf-ai-testbed:groq": ['eval "$(/home/user/miniconda3/bin/conda shell.bash hook)"',
                             "conda activate groqflow"],
    "alcf-ai-testbed:cerebras": ["source /home/user/R_2.4.0/venv_cerebras_pt/bin/activate"],
    "local": [], "sandbox": [],
    # The lent one-GPU machine (issue 26): its python3 holds PyTorch, nothing to load.
    "gpu-box": [], "gpu-box:h100": [], "gpu-box:h200": [],
}
# The variables a user must set, by target: no public page documents the environment.
REQUIRED = {"cosma8": "ORCH_COSMA8_VENV", "cosma8:mi100": "ORCH_COSMA8_VENV", "jade2": "ORCH_JADE2_VENV",
            "perlmutter": "ORCH_PERLMUTTER_CONDA_ENV", "dgx": "ORCH_DGX_VENV", "dgx:h100": "ORCH_DGX_VENV",
            "dgx:a100_80": "ORCH_DGX_VENV", "dgx:h200": "ORCH_DGX_VENV", "dgx:b200": "ORCH_DGX_VENV",
            "graphcore-pod16": "ORCH_POD16_VENV"}


def all_targets() -> list[str]:
    out = []
    for name in available_sites():
        out.append(name)
        out += [f"{name}:{system}" for system in load_site(name).systems]
    return out


TARGETS = all_targets()


def precision_for(site: SiteProfile) -> str:
    return next(p for p in ("bf16", "fp16", "fp32") if p in site.device.precisions)


def gpt2_sweep(target: str, precision: str, extra: str = "") -> str:
    return f"""\
name: envs
{extra}experiments:
  - name: gpt2
    workload: gpt2
    sites: [{target}]
    grid: {{devices: 1, precision: {precision}, batch_size: 4, seq_len: 256, warmup: 1, iters: 2}}
"""


def plan(tmp_path: Path, text: str, env: dict[str, str] | None = None,
         sites_dirs: list[Path] | None = None) -> list[PlannedRun]:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(text)
    return plan_sweep(parse_sweep(sweep), tmp_path / "runs", env=ENV if env is None else env, sites_dirs=sites_dirs)


def vendor_script(target: str, env: dict[str, str]) -> str:
    """The script of the run a vendor's system does run (its runner's representative case), for a
    system whose vendor tool has no gpt2 application at these sizes."""
    site = load_site(target)
    case = check_case(site.launcher.name)
    assert case is not None, target
    workload, batch, seq, params = case
    name, _, system = target.partition(":")
    spec = RunSpec(sweep="envs", experiment=workload, workload=workload, site=name, system=system or None,
                   devices=1, precision=precision_for(site), strategy=None, batch_size=batch, seq_len=seq,
                   repeat=0, params=params, walltime_s=1800)
    resolved = resolve(spec, site, env, site.python or "python3")
    assert resolved.placement is not None, resolved.skip_reason
    return render_script(resolved, RunFiles(Path("/scratch/orch/runs/envs")))


def gpt2_script(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The gpt2 run's batch script on ``target`` (the vendor's representative run where its tool
    has no gpt2 application of these values)."""
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")  # the formula: no torch tracing needed to place one run
    site = load_site(target)
    (run,) = plan(tmp_path, gpt2_sweep(target, precision_for(site)))
    if run.script is None:
        assert check_case(site.launcher.name) is not None, f"{target}: {run.resolved.skip_reason}"
        return vendor_script(target, ENV)
    return run.script


def test_every_site_and_system_has_its_expected_lines() -> None:
    assert set(TARGETS) == set(EXPECTED)


@pytest.mark.parametrize("target", TARGETS)
def test_the_script_activates_the_documented_environment_before_the_program(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = gpt2_script(target, tmp_path, monkeypatch)
    lines = script.splitlines()
    expected = EXPECTED[target]
    program = next(i for i, line in enumerate(lines) if line.startswith("export ORCH_RUN_ID="))
    launcher = len(lines) - 1 - next(i for i, line in enumerate(reversed(lines))
                                     if line and not line.startswith(("#", "export", "cd ", "echo ")))
    positions = [lines.index(line) for line in expected]  # each line, whole, as the page writes it
    assert positions == sorted(positions), f"{target}: out of order"
    assert all(p < program < launcher for p in positions), target
    if expected:  # module and activation scripts read unset variables: nounset is off around them
        assert lines.index("set +u  # module, conda and venv activation scripts read unset variables") < positions[0]
        assert lines.index("set -u") > positions[-1]
    else:  # local, sandbox, gpu-box: the interpreter running orch, nothing loaded
        assert "set +u" not in script
    if any("conda activate" in line for line in expected):  # a batch shell has no `conda init` lines
        assert lines.index(next(line for line in expected if "shell.bash hook" in line)) < \
            lines.index(next(line for line in expected if line.startswith("conda activate")))
    (tmp_path / "job.sh").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], check=True)


@pytest.mark.parametrize("target", TARGETS)
def test_the_profile_cites_its_environments_source(target: str) -> None:
    python_env = load_site(target).python_env
    if target.partition(":")[0] in ("local", "sandbox", "gpu-box"):
        assert python_env.kind == "none"  # the interpreter running orch
        return
    assert python_env.kind != "none" and len(python_env.source) > 20, target
    documented = ("http" in python_env.source or "github" in python_env.source
                  or "/" in python_env.source.split(" ")[0])
    assert documented or python_env.source.startswith("user-given"), python_env.source
    if target in REQUIRED:  # no public page documents one: the user names it, and the profile says so
        assert python_env.required and python_env.prefix_env == REQUIRED[target]
        assert "user-given" in python_env.source, python_env.source


@pytest.mark.parametrize("target", sorted(REQUIRED))
def test_an_environment_the_user_must_name_is_asked_for_at_plan_time(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")
    variable = REQUIRED[target]
    env = {k: v for k, v in ENV.items() if k != variable}
    site = load_site(target)
    (run,) = plan(tmp_path, gpt2_sweep(target, precision_for(site)), env=env)
    reason = run.resolved.skip_reason
    if site.launcher.name not in ("srun", "mpirun", "mpiexec", "torchrun", "deepspeed") and reason and \
            variable not in reason:  # a vendor's tool that has no gpt2 of these values: its own case
        with pytest.raises(AssertionError, match=variable):
            vendor_script(target, env)
        return
    assert run.script is None and reason is not None
    assert f"set ${variable} to " in reason and f"sites/{target.partition(':')[0]}.yaml" in reason, reason


def test_a_relative_prefix_is_refused_and_a_conda_environment_may_be_named(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")
    (run,) = plan(tmp_path, gpt2_sweep("cosma8", "bf16"), env={**ENV, "ORCH_COSMA8_VENV": "venvs/torch"})
    assert run.resolved.skip_reason == ("site cosma8 needs its Python environment: $ORCH_COSMA8_VENV must be an "
                                        "absolute path (the script runs in the run directory), got 'venvs/torch'")
    (run,) = plan(tmp_path, gpt2_sweep("perlmutter", "bf16"),
                  env={**ENV, "ORCH_PERLMUTTER_CONDA_ENV": "/global/common/software/m1/torch env"})
    assert run.script is not None and "conda activate '/global/common/software/m1/torch env'\n" in run.script
    # $HOME, where the AI Testbed's pages put the clones and environments, is read at plan time too.
    (run,) = plan(tmp_path, gpt2_sweep("alcf-ai-testbed:gaudi", "bf16"),
                  env={k: v for k, v in ENV.items() if k != "HOME"})
    assert run.resolved.skip_reason == ("site alcf-ai-testbed needs its Python environment: set $HOME (read by "
                                        "sites/alcf-ai-testbed.yaml (system gaudi) python_env)")


def test_polaris_puts_the_nccl_plugin_it_forces_on_the_library_path(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL_NET="AWS Libfabric" makes NCCL load the aws-ofi-nccl plugin (and fail without it): the
    script puts ALCF's build in front of what the conda module left on LD_LIBRARY_PATH."""
    script = gpt2_script("polaris", tmp_path, monkeypatch)
    lines = script.splitlines()
    prepend = next(line for line in lines if line.startswith("export LD_LIBRARY_PATH="))
    assert lines.index(prepend) > lines.index("conda activate base")
    assert lines.index(prepend) < lines.index("export NCCL_NET='AWS Libfabric'")
    for name, value in (("NCCL_NET_GDR_LEVEL", "PHB"), ("NCCL_CROSS_NIC", "1"), ("NCCL_COLLNET_ENABLE", "1"),
                        ("FI_CXI_DISABLE_HOST_REGISTER", "1"), ("FI_MR_CACHE_MONITOR", "userfaultfd"),
                        ("FI_CXI_DEFAULT_CQ_SIZE", "131072")):
        assert f"export {name}={value}\n" in script
    for before, after in (("/opt/conda/lib", "/opt/conda/lib"), ("", "")):
        env = {"PATH": os.environ["PATH"], **({"LD_LIBRARY_PATH": before} if before else {})}
        out = subprocess.run(["bash", "-c", f'set -u; {prepend}; printf %s "$LD_LIBRARY_PATH"'], env=env,
                             capture_output=True, text=True, check=True).stdout
        plugin = "/soft/libraries/hwloc/lib/:/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"
        assert out == (f"{plugin}:{after}" if after else plugin)


def test_activation_lines_run_in_bash_with_every_value_quoted(tmp_path: Path) -> None:
    """The lines the renderer writes, run: a venv's activate script and conda's hook are found at
    paths with spaces, and a value that looks like shell code is a path, not a command."""
    venv = tmp_path / "my venv $(touch pwned)"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text('export ACTIVATED="venv:$1"\nexport FROM=venv\n')
    conda = tmp_path / "mini conda" / "bin" / "conda"
    conda.parent.mkdir(parents=True)
    conda.write_text("#!/bin/sh\n[ \"$1 $2\" = 'shell.bash hook' ] && "
                     "echo 'conda() { export ACTIVATED=\"conda:$1:$2\"; }'\n")
    conda.chmod(0o755)
    cases = [
        (PythonActivation("venv", (("export", "MODULE=a b"),), prefix=str(venv)), "venv:"),
        (PythonActivation("conda", conda=str(conda), prefix="/envs/with space"), "conda:activate:/envs/with space"),
        (PythonActivation("conda", conda=str(conda)), "conda:activate:"),
    ]
    for activation, expected in cases:
        lines = python_env_lines(activation)
        script = "set -euo pipefail\nset +u\n" + "\n".join(lines) + '\nset -u\nprintf %s "$ACTIVATED"\n'
        out = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
        assert out.stdout == expected, (lines, out.stderr)
    assert not (tmp_path / "pwned").exists()
    assert python_env_lines(cases[0][0])[0] == "export 'MODULE=a b'"  # module lines: re-quoted word by word


def test_python_env_must_say_what_it_activates() -> None:
    with pytest.raises(ValueError, match="kind none runs nothing"):
        PythonEnv.model_validate({"kind": "none", "modules": ["module load x"]})
    with pytest.raises(ValueError, match="kind modules needs its module lines"):
        PythonEnv.model_validate({"kind": "modules"})
    with pytest.raises(ValueError, match="kind modules activates no environment: prefix_env"):
        PythonEnv.model_validate({"kind": "modules", "modules": ["module load x"], "prefix_env": "X"})
    with pytest.raises(ValueError, match="required needs prefix_env"):
        PythonEnv.model_validate({"kind": "venv", "required": True})
    with pytest.raises(ValueError, match="No closing quotation"):
        PythonEnv.model_validate({"kind": "modules", "modules": ["module load 'x"]})
    with pytest.raises(ValueError, match="environment variable's name"):
        PythonEnv.model_validate({"kind": "venv", "prefix_env": "NOT A NAME"})


def test_a_profile_error_in_python_env_names_file_line_and_field(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "sites" / "sandbox.yaml").read_text()
    bad = text.replace("python_env:\n  kind: none\n", "python_env:\n  kind: venv\n  required: true\n")
    (tmp_path / "sandbox.yaml").write_text(bad)
    with pytest.raises(SourceError, match=r"sandbox.yaml:\d+: python_env: required needs prefix_env"):
        load_site("sandbox", [tmp_path])


def test_a_system_replaces_the_sites_python_env_wholesale() -> None:
    site = load_site("alcf-ai-testbed")
    cerebras = load_site("alcf-ai-testbed:cerebras")
    assert site.python_env.default == "/opt/sambaflow/apps/nlp/transformers_on_rdu/venv"
    assert cerebras.python_env.default == "${HOME}/R_2.4.0/venv_cerebras_pt"
    assert cerebras.python_env.prefix_env == "ORCH_CEREBRAS_VENV" and not cerebras.python_env.modules
    assert load_site("sophia:bigmem").python_env == load_site("sophia").python_env  # none of its own: the site's


# ---------------------------------------------------------------------- a sweep's site_overrides

OVERRIDES = """\
site_overrides:
  baskerville:
    setup: [module purge, module load baskerville, module load bask-apps/live]
    env: {NCCL_DEBUG: INFO, ODD: "a b; $(touch pwned)"}
    python_env: {kind: venv, prefix: /rds/projects/me/venvs/torch-2.6, source: my own}
  polaris:
    env: {NCCL_NET: null, NCCL_COLLNET_ENABLE: null}
    python_env: {prefix: /lus/eagle/projects/me/envs/base-clone}
"""


def test_a_sweep_overrides_a_sites_setup_env_and_python_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")
    (bask,) = plan(tmp_path, gpt2_sweep("baskerville", "bf16", OVERRIDES))
    assert bask.script is not None
    lines = bask.script.splitlines()
    assert lines[lines.index("module load bask-apps/live") + 1] == \
        "source /rds/projects/me/venvs/torch-2.6/bin/activate"
    assert "module load PyTorch/2.1.2-foss-2022b-CUDA-11.8.0" not in lines  # kind venv replaced the modules
    assert "export NCCL_DEBUG=INFO" in lines and "export ODD='a b; $(touch pwned)'" in lines
    assert bask.spec.site_overrides is not None and bask.spec.site_overrides["env"]["NCCL_DEBUG"] == "INFO"
    (plain,) = plan(tmp_path, gpt2_sweep("baskerville", "bf16"))
    assert plain.spec.id == bask.spec.id  # the same measurement: the id does not change, the script does
    assert plain.script is not None and "module load PyTorch/2.1.2-foss-2022b-CUDA-11.8.0\n" in plain.script
    # Merged key by key: Polaris keeps its conda module, activates the user's clone, and drops the plugin.
    (pol,) = plan(tmp_path, gpt2_sweep("polaris", "bf16", OVERRIDES))
    assert pol.script is not None
    assert "module load conda\n" in pol.script and HOOK in pol.script
    assert "conda activate /lus/eagle/projects/me/envs/base-clone\n" in pol.script
    assert "NCCL_NET=" not in pol.script and "NCCL_COLLNET_ENABLE" not in pol.script
    assert "export NCCL_CROSS_NIC=1\n" in pol.script


def test_an_experiments_overrides_apply_over_the_sweeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")
    text = gpt2_sweep("baskerville:a100_80", "bf16", OVERRIDES) + """\
    site_overrides:
      baskerville:a100_80:
        setup: [module load baskerville]
        env: {NCCL_DEBUG: WARN}
"""
    (run,) = plan(tmp_path, text)
    assert run.script is not None
    assert "module load baskerville\nsource /rds/projects/me/venvs/torch-2.6/bin/activate\n" in run.script
    assert "module purge" not in run.script and "export NCCL_DEBUG=WARN\n" in run.script


def test_the_user_can_name_the_prefix_in_the_sweep_instead_of_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")
    env = {k: v for k, v in ENV.items() if k != "ORCH_JADE2_VENV"}
    text = gpt2_sweep("jade2", "fp16", "site_overrides:\n  jade2: {python_env: {prefix: /jmain02/home/me/venv}}\n")
    (run,) = plan(tmp_path, text, env=env)
    assert run.script is not None and "source /jmain02/home/me/venv/bin/activate\n" in run.script


@pytest.mark.parametrize("overrides, where, message", [
    ("  baskerville: {setup: [\"echo 'unterminated\"]}\n", "site_overrides.baskerville.setup",
     "setup line \"echo 'unterminated\": No closing quotation"),
    ("  baskerville: {env: {BAD-NAME: x}}\n", "site_overrides.baskerville.env",
     "expected environment variable names, got 'BAD-NAME'"),
    ("  baskerville: {python_env: {prefixx: /x}}\n", "site_overrides.baskerville.python_env.prefixx",
     "unknown field"),
    ("  baskerville: {modules: [x]}\n", "site_overrides.baskerville.modules", "unknown field"),
    ("  'bask erville': {env: {A: b}}\n", "site_overrides", "expected 'site' or 'site:system' keys"),
    ("  baskerville: {env_prepend: {PATH: []}}\n", "site_overrides.baskerville.env_prepend",
     "expected a list of directories"),
])
def test_bad_overrides_name_file_line_and_field(tmp_path: Path, overrides: str, where: str, message: str) -> None:
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(gpt2_sweep("baskerville", "bf16", "site_overrides:\n" + overrides))
    with pytest.raises(SourceError) as caught:
        parse_sweep(sweep)
    text = str(caught.value)
    assert text.startswith(f"{sweep}:") and f": {where}: " in text and message in text, text


def test_overrides_that_leave_the_profile_invalid_are_a_plan_error(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_TRACE", "0")
    text = gpt2_sweep("local", "fp32", "site_overrides:\n  local: {python_env: {prefix: /opt/venv}}\n")
    with pytest.raises(UserError, match="site_overrides for local: python_env: kind none activates no "
                                        "environment: prefix belong to kind venv or conda"):
        plan(tmp_path, text)


def test_a_rehearsal_on_this_machine_drops_the_sites_environment() -> None:
    """`orch sites rehearsal` runs the site's directives on this machine's CPU: the site's modules,
    environments and library paths are not this machine's."""
    for site in ("baskerville", "polaris", "alcf-ai-testbed"):
        _, text, changes = rehearsal_profile(site)
        data: dict[str, Any] = yaml.safe_load(text)
        assert data["python_env"] == {"kind": "none"} and not data.get("env_prepend")
        for overrides in (data.get("systems") or {}).values():
            assert overrides.get("python_env", {"kind": "none"}) == {"kind": "none"}
        assert any("python_env" in change for change in changes), changes
