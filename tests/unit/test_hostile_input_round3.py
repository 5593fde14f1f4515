"""Hostile input, round 3 (issue 53, part A): what a job, another user or a mistyped path can
write is never trusted -- no pickle loaded, no pid signalled, no path followed or deleted
without checks -- and every user-supplied name is checked for its type before use."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import SourceError
from orchestrator.plan.sweep import parse_sweep

SWEEP = """\
name: demo
experiments:
  - name: e
    workload: gemm
    sites: [local]
    walltime: 10
    grid: {devices: [1], m: 64}
"""


# ---------------------------------------------------------------- names of every type (real use 4)

@pytest.mark.parametrize("name", ["[a, b]", "{a: 1}", "1", "true", "null"])
def test_an_experiment_name_that_is_not_text_with_a_variant_is_a_clear_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.replace("name: e", f"name: {name}") + "variants:\n  tiny: {walltime: 5}\n")
    with pytest.raises(SourceError) as info:
        parse_sweep(path, variant="tiny")
    assert "experiments[0].name" in str(info.value) or "experiments.0.name" in str(info.value)
    assert f"{path}:3" in str(info.value)


@pytest.mark.parametrize("name", ["[a]", "{a: 1}", "3", "true"])
def test_a_sweep_name_that_is_not_text_with_a_variant_is_a_clear_error(tmp_path: Path, name: str) -> None:
    # Once stringified into "3-tiny" (planned under a name never written) or "['a']-tiny".
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.replace("name: demo", f"name: {name}") + "variants:\n  tiny: {walltime: 5}\n")
    with pytest.raises(SourceError) as info:
        parse_sweep(path, variant="tiny")
    assert str(info.value).startswith(f"{path}:1: name: expected the sweep's name (text)")
