"""The harness's pure parts: launcher detection, statistics, metrics file, command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.results.metrics_schema import MetricsFile
from tests.workloads.workload_helpers import REPO
from workloads import registry
from workloads.harness import cli, dist, metrics, timing


def test_torchrun_variables_win() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "1234",
           "SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}
    assert dist.detect(env) == dist.DistEnv(3, 8, 1, "torchrun", "n1", 1234)


def test_slurm_step() -> None:
    env = {"SLURM_PROCID": "5", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "16",
           "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "gpu[012-015,020],login1", "SLURM_JOB_ID": "123456"}
    got = dist.detect(env, use_scontrol=False)
    assert got == dist.DistEnv(5, 8, 1, "slurm", "gpu012", 20000 + 123456 % 20000)


def test_slurm_batch_step_is_single_process() -> None:
    # The batch script has SLURM_PROCID=0 but no step: a lone python must not wait for others.
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert dist.detect(env).launcher == "single"


def test_pbs_pals(tmp_path: Path) -> None:
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov\nx3006c0s13b1n0\n")
    env = {"PALS_RANKID": "6", "PMI_SIZE": "8", "PALS_LOCAL_RANKID": "2", "PBS_NODEFILE": str(nodefile),
           "PBS_JOBID": "98765.polaris-pbs-01"}
    got = dist.detect(env)
    assert (got.rank, got.world_size, got.local_rank, got.launcher) == (6, 8, 2, "pmi")
    assert got.master_addr == "x3006c0s13b0n0.hsn.cm.polaris.alcf.anl.gov"
    assert got.master_port == 20000 + 98765 % 20000


def test_mpich_and_openmpi() -> None:
    assert dist.detect({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MASTER_ADDR": "h"}) == \
        dist.DistEnv(1, 2, 1, "pmi", "h", dist.DEFAULT_PORT)
    got = dist.detect({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
                       "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
    assert (got.rank, got.world_size, got.launcher) == (2, 4, "ompi")
    assert dist.detect({}) == dist.DistEnv(0, 1, 0, "single", None, None)


@pytest.mark.parametrize("nodelist, first", [
    ("node01", "node01"),
    ("a1,b2", "a1"),
    ("nid[001-004,010]", "nid001"),
    ("gpu[7,3-4],cpu[1-2]", "gpu7"),
    ("r[1-2]n[03-04]", "r1n03"),
    ("x1000c0s0b0n[0-1]", "x1000c0s0b0n0"),
])
def test_first_host(nodelist: str, first: str) -> None:
    assert dist.first_host(nodelist) == first


def test_backends() -> None:
    assert dist.backend_for("cpu") == "gloo"
    assert dist.backend_for("cuda") == "nccl"


def test_percentiles_and_summary() -> None:
    times = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert timing.percentile(times, 50) == 3.0
    assert timing.percentile(times, 90) == pytest.approx(7.6)  # numpy's linear method
    s = timing.summarize(times)
    assert s["step_time_s"] == s["step_time_p50_s"] == 3.0
    assert s["step_time_std_s"] == pytest.approx(3.5355339, rel=1e-6)  # sample std
    assert timing.summarize([2.0])["step_time_std_s"] == 0.0


def test_metrics_document_validates_and_is_atomic(tmp_path: Path) -> None:
    doc = metrics.document(
        workload="gemm", params={"m": 1}, precision="fp32", world_size=1,
        device={"type": "cpu", "model": "x", "count": 1},
        metrics={"tflops": 1.0, "bad": float("nan"), "neg": -1.0, "none": None, "flag": True},
        warmup_steps=1, step_times_s=[0.1], env={"inf": float("inf")},
        started_at=metrics.utc_now(), finished_at=metrics.utc_now())
    target = metrics.write_atomic(tmp_path / "sub" / "m.json", doc)
    loaded = json.loads(target.read_text())
    assert loaded["metrics"] == {"tflops": 1.0, "bad": None, "neg": None, "none": None, "flag": None}
    MetricsFile.model_validate(loaded)
    assert [p.name for p in target.parent.iterdir()] == ["m.json"]  # no temporary left behind


def test_parse_bool() -> None:
    assert cli.parse_bool("true") and cli.parse_bool("True") and not cli.parse_bool("false")
    with pytest.raises(argparse.ArgumentTypeError):
        cli.parse_bool("maybe")


def test_command_line_from_registry() -> None:
    w = registry.get("gpt2")
    args = cli.parse_args(w, ["--model", "tiny", "--compile", "false", "--batch-size", "3", "--strategy",
                              "zero2", "--precision", "bf16", "--peak-tflops", "312"])
    assert (args.model, args.compile, args.batch_size, args.strategy, args.peak_tflops) == \
        ("tiny", False, 3, "zero2", 312.0)
    gemm = cli.parse_args(registry.get("gemm"), ["--", "--size-m", "8", "--k", "4", "--strategy", "none"])
    assert (gemm.m, gemm.k) == (8, 4)
    with pytest.raises(SystemExit):
        cli.parse_args(registry.get("gemm"), ["--precision", "fp64"])


def _every_flag(workload: registry.Workload) -> list[str]:
    argv = []
    for param in workload.params + workload.axis_params():
        argv += [param.flag, "true" if param.type is bool else str(param.default)]
    return argv + ["--precision", "fp32", "--device", "cpu", "--peak-tflops", "1.0", "--output", "m.json"]


def test_flags_survive_launchers_argument_parsing() -> None:
    """torchrun and deepspeed parse their own options with abbreviations on: a workload flag
    that is a prefix of one of theirs (``--m`` of ``--module``) would be taken or refused by the
    launcher instead of reaching the workload. Run their real parsers on every flag we have."""
    from torch.distributed.run import parse_args as torchrun_args

    try:
        from deepspeed.launcher.runner import parse_args as deepspeed_args
    except Exception:  # DeepSpeed is optional; torchrun's parser is always checked
        deepspeed_args = None
    for workload in registry.WORKLOADS.values():
        ours = _every_flag(workload)
        got = torchrun_args(["--standalone", "--nproc-per-node=2", "-m", workload.module, *ours])
        assert got.training_script_args == ours, workload.name
        if deepspeed_args is not None:
            got = deepspeed_args(["--num_gpus=2", "--no_local_rank", "--module", workload.module, *ours])
            assert got.user_args == ours, workload.name


def test_registry_needs_no_torch() -> None:
    code = ("import sys, workloads.registry as r; from workloads import flops, shapes; "
            "from orchestrator.predict.formulas import FORMULAS; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "[FORMULAS[w.name](w.defaults()) for w in r.WORKLOADS.values() if w.name in FORMULAS]; "
            "print(len(r.WORKLOADS))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 8


def test_every_workload_help() -> None:
    names = sorted(registry.WORKLOADS)
    code = (
        "import contextlib, importlib, io, sys\n"
        f"for name in {names!r}:\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            importlib.import_module('workloads.' + name).main(['--help'])\n"
        "        except SystemExit as e:\n"
        "            assert e.code == 0, (name, e.code)\n"
        "    text = buf.getvalue()\n"
        "    assert 'usage: python -m workloads.' + name in text and '--precision' in text, name\n"
        "    print(name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == names
