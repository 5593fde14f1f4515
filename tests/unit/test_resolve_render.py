"""Resolve (placement or skip reason) and render (quoted, strict) without any I/O but reading profiles."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.plan.expand import RunSpec
from orchestrator.plan.render import RenderError, RunFiles, directive, render_script, shell_line
from orchestrator.plan.resolve import resolve
from orchestrator.sites.profiles import SiteProfile


def site(**overrides) -> SiteProfile:
    data = {
        "name": "testsite", "scheduler": "slurm", "max_nodes": 4,
        "device": {"type": "cuda", "model": "V100-SXM2-32GB", "per_node": 4, "memory_gb": 32,
                   "precisions": ["fp32", "fp16"], "peak_tflops": {"fp32": 15.7, "fp16": 125}},
        "queues": [{"name": "small", "max_nodes": 1, "max_walltime": "01:00:00"},
                   {"name": "big", "min_nodes": 1, "max_nodes": 4, "max_walltime": "24:00:00"}],
        "launcher": {"name": "srun"},
        "setup": ["module load cuda/12.1"],
        "env": {"NCCL_DEBUG": "WARN"},
    }
    data.update(overrides)
    return SiteProfile.model_validate(data)


def spec(**overrides: Any) -> RunSpec:
    base: dict[str, Any] = dict(sweep="s", experiment="e", workload="gemm", site="testsite", system=None, devices=1,
                precision="fp32", strategy=None, batch_size=None, seq_len=None, repeat=0,
                params=(("m", 64), ("n", 64), ("k", 64)), walltime_s=1800)
    base.update(overrides)
    return RunSpec(**base)


def test_single_device_goes_to_the_small_queue() -> None:
    placed = resolve(spec(), site(), {}, "python3").placement
    assert placed is not None
    assert (placed.nodes, placed.tasks_per_node, placed.queue, placed.peak_tflops) == (1, 1, "small", 15.7)
    assert placed.argv[:4] == ["srun", "--nodes=1", "--ntasks-per-node=1", "--ntasks=1"]
    assert "--size-m" in placed.argv and "--peak-tflops" in placed.argv


def test_eight_devices_take_two_nodes_in_the_big_queue() -> None:
    placed = resolve(spec(devices=8), site(), {}, "python3").placement
    assert placed is not None and (placed.nodes, placed.tasks_per_node, placed.queue) == (2, 4, "big")


def test_long_walltime_skips_small_queue() -> None:
    placed = resolve(spec(walltime_s=3 * 3600), site(), {}, "python3").placement
    assert placed is not None and placed.queue == "big"


@pytest.mark.parametrize("overrides, reason", [
    ({"precision": "bf16"}, "precision bf16 not supported by V100-SXM2-32GB"),
    ({"devices": 32}, "32 devices requested"),
    ({"devices": 6}, "do not fill whole nodes"),
    ({"walltime_s": 48 * 3600}, "walltime 48:00:00 exceeds"),
    ({"params": (("m", 100_000), ("n", 100_000), ("k", 100_000))}, "predicted to need 120.0 GB per device"),
])
def test_runs_the_site_cannot_do_are_skipped_with_a_reason(overrides, reason) -> None:
    resolved = resolve(spec(**overrides), site(), {}, "python3")
    assert resolved.skipped and reason in (resolved.skip_reason or "")


def test_account_comes_from_the_environment_and_may_be_required() -> None:
    profile = site(account={"env": "MY_ACCT", "required": True})
    assert "set $MY_ACCT" in (resolve(spec(), profile, {}, "python3").skip_reason or "")
    placed = resolve(spec(), profile, {"MY_ACCT": "proj42"}, "python3").placement
    assert placed is not None and placed.account == "proj42"


def test_power_of_two_devices() -> None:
    profile = site(device={"type": "ipu", "model": "GC200", "per_node": 16, "precisions": ["fp32"],
                           "counts": "power_of_two"})
    assert "powers of two" in (resolve(spec(devices=3), profile, {}, "python3").skip_reason or "")


def rendered(tmp_path: Path, **spec_overrides) -> str:
    resolved = resolve(spec(**spec_overrides), site(), {"ORCH_ACCOUNT": "proj1"}, "python3")
    return render_script(resolved, RunFiles(tmp_path / "run"))


def test_slurm_script_has_directives_and_quoted_command(tmp_path: Path) -> None:
    script = rendered(tmp_path, devices=8)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --ntasks-per-node=4\n" in script
    assert "#SBATCH --partition=big\n" in script and "#SBATCH --account=proj1\n" in script
    assert "#SBATCH --time=00:30:00\n" in script
    assert "module load cuda/12.1\n" in script and "export NCCL_DEBUG=WARN\n" in script
    # bash accepts the script as written
    (tmp_path / "job.sh").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], check=True)


HOSTILE = ['"; rm -rf ~"', "$(touch {canary})", "`touch {canary}`", "a'b\"c", "x\ny; touch {canary}"]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_values_reach_the_program_literally_and_never_run(tmp_path: Path, template: str) -> None:
    canary = tmp_path / "pwned"
    value = template.format(canary=canary)
    script = rendered(tmp_path, params=(("m", 64), ("tag", value)))
    # Run the script for real with a stand-in srun that records the argv it was given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "srun"
    fake.write_text("#!/usr/bin/env python3\nimport json, sys\n"
                    f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    (bin_dir / "module").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "module").chmod(0o755)
    (tmp_path / "run").mkdir()
    (tmp_path / "job.sh").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    subprocess.run(["bash", str(tmp_path / "job.sh")], check=True, env=env, capture_output=True)
    import json

    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--tag") + 1] == value
    assert not canary.exists()


def test_setup_lines_are_requoted_word_by_word() -> None:
    assert shell_line("module load conda") == "module load conda"
    assert shell_line("echo $(touch /tmp/pwned); rm -rf ~") == "echo '$(touch' '/tmp/pwned);' rm -rf '~'"


@pytest.mark.parametrize("value", ["a\nb", "x y", "$(id)", "a;b"])
def test_directive_values_refuse_anything_that_could_break_the_line(value: str) -> None:
    with pytest.raises(RenderError):
        directive(value)


def test_undefined_template_variables_are_errors(tmp_path: Path) -> None:
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "broken.sh.j2").write_text("#!/bin/bash\necho {{ no_such_thing }}\n")
    from orchestrator.plan.render import environment

    resolved = resolve(spec(), site(template="broken.sh.j2"), {}, "python3")
    with pytest.raises(RenderError, match="no_such_thing"):
        render_script(resolved, RunFiles(tmp_path / "run"), environment([tmp_path / "tpl"]))


def test_memory_check_can_be_turned_off_to_measure_where_it_breaks() -> None:
    big = (("m", 100_000), ("n", 100_000), ("k", 100_000))
    assert resolve(spec(params=big), site(), {}, "python3").skipped
    from dataclasses import replace

    assert not resolve(replace(spec(params=big), check_memory=False), site(), {}, "python3").skipped
