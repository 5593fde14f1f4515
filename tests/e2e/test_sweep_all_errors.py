"""`orch plan` of a sweep with several mistakes reports every one of them at once (issue 27: only
the first was reported, so a sweep took as many runs of `orch plan` as it had mistakes), each as
it would read alone (file:line: field: what was expected, a near name suggested), and plans
nothing."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_orch, write

BROKEN = """\
name: multi
experiments:
  - name: a
    workload: gemm
    sites: [local]
    walltime: 10
    nodes: 3
    grid: {m: sixty, precision: [fp32, bf61]}
  - name: b
    workload: gtp2
    sites: [locl, atlantis]
    walltime: 10
    retry: {max_attempt: 2}
  - name: c
    workload: gpt2
    sites: [local]
    walltime: soon
    grid: {model: tiny, strategy: [ddp, fsdp-ful], batch_size: 2}
"""


def test_every_mistake_of_a_sweep_is_reported_at_once_and_nothing_is_planned(workdir: Path) -> None:
    sweep = write(workdir / "s.yaml", BROKEN)
    for command in (("plan",), ("plan", "--dry-run"), ("run",)):
        proc = run_orch(*command, str(sweep), cwd=workdir)
        assert proc.returncode == 2 and not proc.stdout and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.strip().splitlines()
        where = f"{workdir}/s.yaml"
        assert lines[0] == f"error: 9 problems in {where}:", proc.stderr
        expected = [
            f"{where}:7: experiments[0].nodes: unknown field",
            f"{where}:8: experiments[0].grid.m: expected int for gemm parameter 'm', got 'sixty'",
            f"{where}:8: experiments[0].grid.precision[1]: expected one of fp32, tf32, fp16, bf16, fp8, got 'bf61' "
            "(did you mean 'bf16'?)",
            f"{where}:10: experiments[1].workload: unknown workload 'gtp2' (did you mean 'gpt2'?)",
            f"{where}:11: experiments[1].sites[0]: unknown site 'locl' (did you mean 'local'?)",
            f"{where}:11: experiments[1].sites[1]: unknown site 'atlantis' (known: ",
            f"{where}:13: experiments[1].retry.max_attempt: unknown field (did you mean 'max_attempts'?)",
            f"{where}:17: experiments[2].walltime: expected a walltime like",
            f"{where}:18: experiments[2].grid.strategy[1]: expected a strategy of gpt2: ddp, fsdp-full, "
            "fsdp-grad-op, zero1, zero2, zero3, got 'fsdp-ful' (did you mean 'fsdp-full'?)",
        ]
        assert len(lines) == 1 + len(expected), proc.stderr
        for line, start in zip(lines[1:], expected):
            assert line.startswith("  " + start), (line, start)
        assert not (workdir / ".orch").exists()


def test_one_mistake_still_reads_as_one_line(workdir: Path) -> None:
    one = BROKEN.replace("    nodes: 3\n", "").replace("m: sixty, precision: [fp32, bf61]", "m: 64") \
        .replace("workload: gtp2", "workload: gemm").replace("[locl, atlantis]", "[local]") \
        .replace("walltime: soon", "walltime: 10").replace("    retry: {max_attempt: 2}\n", "") \
        .replace("fsdp-ful]", "fsdp-fll]")
    proc = run_orch("plan", str(write(workdir / "s.yaml", one)), "--dry-run", cwd=workdir)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {workdir}/s.yaml:16: experiments[2].grid.strategy[1]: expected a strategy of gpt2: ddp, fsdp-full, "
        "fsdp-grad-op, zero1, zero2, zero3, got 'fsdp-fll' (did you mean 'fsdp-full'?)"]
