"""A serving run on several devices (issue 28): one server process drives all the run's devices with
tensor parallelism, so the rendered job starts the workload once, as one task holding every device,
and passes the device count as --server-tp; never one copy per device through the site's launcher.
Rendered scripts only: no Slurm, PBS, GPU or Gaudi is reachable from these tests."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from orchestrator.plan.expand import RunSpec
from orchestrator.plan.render import RunFiles, render_script
from orchestrator.plan.resolve import Resolved, resolve
from orchestrator.sites.profiles import load_site
from tests.sites.test_sites import ENV

SERVING = (("backend", "vllm"), ("model", "llama2-7b"), ("rate", 4.0), ("num_requests", 64),
           ("input_len", 512), ("output_len", 64), ("server_args", "--max-num-seqs 8; rm -rf ~"))


def _resolved(target: str, devices: int, params: tuple[tuple[str, object], ...] = SERVING) -> Resolved:
    site_name, _, system = target.partition(":")
    site = load_site(target)
    spec = RunSpec(sweep="serve", experiment="tp", workload="llm_serving", site=site_name, system=system or None,
                   devices=devices, precision="bf16", strategy=None, batch_size=None, seq_len=None, repeat=0,
                   params=params, walltime_s=1800)
    return resolve(spec, site, ENV, site.python or "python3")


def _script(target: str, devices: int, tmp_path: Path, params: tuple[tuple[str, object], ...] = SERVING) -> str:
    r = _resolved(target, devices, params)
    assert r.placement is not None, r.skip_reason
    text = render_script(r, RunFiles(Path("/scratch/orch/runs/serve")))
    (tmp_path / "job.sh").write_text(text)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], check=True)
    return text


def _workload_line(text: str) -> list[str]:
    (line,) = [ln for ln in text.splitlines() if "workloads.llm_serving" in ln and not ln.lstrip().startswith("#")]
    return shlex.split(line)


def test_slurm_node_of_four_gpus_runs_one_server_over_all_four(tmp_path: Path) -> None:
    text = _script("baskerville", 4, tmp_path)
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --nodes=1" in text
    assert "#SBATCH --gres=gpu:4" in text or "#SBATCH --gpus-per-node=4" in text, text
    words = _workload_line(text)
    assert "srun" not in words and words[words.index("-m") + 1] == "workloads.llm_serving"
    assert words[words.index("--server-tp") + 1] == "4"
    # The sweep's server_args reach the program as one word, never as shell.
    assert words[words.index("--server-args") + 1] == "--max-num-seqs 8; rm -rf ~"


def test_pbs_node_of_four_gpus_runs_one_server_over_all_four(tmp_path: Path) -> None:
    text = _script("polaris", 4, tmp_path)
    assert "#PBS -l select=1:" in text, text
    words = _workload_line(text)
    # Not mpiexec -n 4, and not behind the per-rank GPU affinity wrapper (it would pin one GPU).
    assert "mpiexec" not in words and "orch-gpu-affinity.sh" not in words
    assert words[words.index("--server-tp") + 1] == "4"


def test_training_workloads_still_start_one_process_per_device(tmp_path: Path) -> None:
    """The one-process rule is the serving workload's (registry devices_param), not the site's."""
    site = load_site("baskerville")
    spec = RunSpec(sweep="s", experiment="g", workload="gemm", site="baskerville", system=None, devices=4,
                   precision="bf16", strategy=None, batch_size=None, seq_len=None, repeat=0,
                   params=(("m", 1024), ("n", 1024), ("k", 1024)), walltime_s=1800)
    r = resolve(spec, site, ENV, "python")
    assert r.placement is not None and r.placement.tasks_per_node == 4 and r.placement.argv[0] == "srun"


def test_a_sweeps_own_server_tp_is_kept(tmp_path: Path) -> None:
    words = _workload_line(_script("baskerville", 4, tmp_path, (*SERVING, ("server_tp", 2))))
    assert [w for w in words if w == "--server-tp"] == ["--server-tp"]
    assert words[words.index("--server-tp") + 1] == "2"


def test_a_server_over_several_nodes_is_refused_with_the_reason() -> None:
    r = _resolved("baskerville", 8)
    assert r.placement is None and "one process on one node" in (r.skip_reason or ""), r.skip_reason


@pytest.mark.parametrize("target", ["gaudi2-cluster", "alcf-ai-testbed:gaudi"])
def test_gaudi2_profiles_start_one_process_with_the_device_hpu(target: str, tmp_path: Path) -> None:
    """On Gaudi2 the deepspeed launcher would give the process one HPU: the server is started
    directly, told device hpu, which makes backend vllm render Intel's Gaudi vLLM (launch.py)."""
    words = _workload_line(_script(target, 8, tmp_path))
    assert "deepspeed" not in words
    assert words[words.index("--device") + 1] == "hpu" and words[words.index("--server-tp") + 1] == "8"
