"""Expansion: cross products, zip groups, exclusions, repeats and stable ids."""

from __future__ import annotations

import subprocess
import sys

from orchestrator.plan.expand import expand
from orchestrator.plan.sweep import parse_sweep

SWEEP = """\
name: demo
experiments:
  - name: shapes
    workload: gemm
    sites: [local]
    grid:
      devices: [1, 2]
      precision: [fp32, bf16]
    zip:
      shape:
        m: [64, 2560]
        n: [1760, 64]
        k: [1760, 2560]
    exclude:
      - {devices: 2, precision: bf16}
"""


def runs(text: str = SWEEP):
    return expand(parse_sweep("s.yaml", text).sweep)


def test_cross_product_with_zip_and_exclude() -> None:
    got = {(r.devices, r.precision, r.param_dict["m"], r.param_dict["n"], r.param_dict["k"]) for r in runs()}
    # 2 devices x 2 precisions x 2 shapes = 8, minus the 2 with devices=2 and bf16.
    assert len(got) == 6
    assert (1, "bf16", 2560, 64, 2560) in got and (2, "fp32", 64, 1760, 1760) in got
    assert not any(d == 2 and p == "bf16" for d, p, *_ in got)
    # zip keeps columns together: never m=64 with n=64.
    assert not any(m == 64 and n == 64 for _, _, m, n, _ in got)


def test_ids_are_unique_and_stable_across_processes() -> None:
    ids = [r.id for r in runs()]
    assert len(set(ids)) == len(ids)
    code = ("import sys; from orchestrator.plan.expand import expand; from orchestrator.plan.sweep import parse_sweep;"
            "print(' '.join(r.id for r in expand(parse_sweep('s.yaml', sys.stdin.read()).sweep)))")
    other = subprocess.run([sys.executable, "-c", code], input=SWEEP, capture_output=True, text=True, check=True)
    assert other.stdout.split() == ids


def test_changing_a_value_changes_only_that_runs_id() -> None:
    before = {r.id for r in runs()}
    after = {r.id for r in runs(SWEEP.replace("k: [1760, 2560]", "k: [1760, 4096]"))}
    assert len(before & after) == 3 and len(after - before) == 3


def test_walltime_does_not_change_identity() -> None:
    longer = SWEEP.replace("    sites: [local]", "    sites: [local]\n    walltime: '02:00:00'")
    assert [r.id for r in runs(longer)] == [r.id for r in runs()]


def test_repeats_make_distinct_runs() -> None:
    text = SWEEP.replace("      devices: [1, 2]", "      devices: [1, 2]\n      repeats: 3")
    got = runs(text)
    assert len(got) == 18
    assert sorted({r.repeat for r in got}) == [0, 1, 2]


def test_scalars_are_single_values_and_defaults_apply() -> None:
    text = """\
name: d
experiments:
  - name: e
    workload: gemm
    sites: [local]
    grid: {m: 128}
"""
    (only,) = runs(text)
    assert (only.devices, only.precision, only.param_dict) == (1, "fp32", {"m": 128})


def test_retry_policy_is_carried_to_runs() -> None:
    text = SWEEP.replace("name: demo\n", "name: demo\nretry: {max_attempts: 3, failures: [timeout]}\n")
    assert all(r.max_attempts == 3 and r.retry_on == ("timeout",) for r in runs(text))
