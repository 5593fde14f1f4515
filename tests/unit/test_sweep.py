"""Sweep parsing: valid files load; each kind of mistake names file:line and the field."""

from __future__ import annotations

import pytest

from orchestrator.errors import SourceError
from orchestrator.plan.sweep import parse_sweep

GOOD = """\
name: demo
experiments:
  - name: gemm-sizes
    workload: gemm
    sites: [local]
    grid:
      devices: [1, 2]
      precision: [fp32, bf16]
      m: [64, 128]
"""


def parse(text: str):
    return parse_sweep("sweep.yaml", text)


def error_of(text: str) -> SourceError:
    with pytest.raises(SourceError) as info:
        parse(text)
    return info.value


def test_valid_sweep_loads() -> None:
    loaded = parse(GOOD)
    exp = loaded.sweep.experiments[0]
    assert loaded.sweep.name == "demo"
    assert exp.workload == "gemm" and exp.grid["m"] == [64, 128]


def test_yaml_syntax_error_names_file_and_line() -> None:
    err = error_of(GOOD.replace("precision: [fp32, bf16]", "precision: [fp32, bf16"))
    assert err.file == "sweep.yaml" and err.line is not None and err.line >= 8
    assert "YAML syntax error" in str(err)
    assert "\n" not in str(err)


def test_unknown_workload_names_line_and_field() -> None:
    err = error_of(GOOD.replace("workload: gemm", "workload: gemmm"))
    assert (err.line, err.field) == (4, "experiments[0].workload")
    assert "unknown workload 'gemmm'" in str(err) and "gemm" in str(err)
    assert str(err).startswith("sweep.yaml:4: experiments[0].workload:")


def test_wrong_type_names_line_and_field() -> None:
    err = error_of(GOOD.replace("devices: [1, 2]", "devices: [1, two]"))
    assert err.line == 7 and err.field == "experiments[0].grid.devices[1]"
    assert "expected a positive integer" in str(err)


def test_unknown_field_names_line_and_field() -> None:
    err = error_of(GOOD.replace("    sites: [local]", "    sites: [local]\n    colour: blue"))
    assert (err.line, err.field) == (6, "experiments[0].colour")
    assert "unknown field" in str(err)


def test_unknown_grid_key_is_an_unknown_field() -> None:
    err = error_of(GOOD.replace("m: [64, 128]", "mm: [64, 128]"))
    assert err.line == 9 and err.field == "experiments[0].grid.mm" and "unknown field" in str(err)


def test_bad_precision_lists_the_choices() -> None:
    err = error_of(GOOD.replace("bf16]", "fp17]"))
    assert err.field == "experiments[0].grid.precision[1]" and "fp32, tf32, fp16, bf16, fp8" in str(err)


def test_zip_groups_need_equal_lengths() -> None:
    text = GOOD.replace("      m: [64, 128]\n", "    zip:\n      shape:\n        m: [1, 2]\n        n: [1]\n")
    err = error_of(text)
    assert err.field == "experiments[0].zip.shape" and "equal lengths" in str(err)


def test_axis_in_grid_and_zip_is_refused() -> None:
    text = GOOD + "    zip:\n      shape:\n        m: [1, 2]\n        n: [1, 2]\n"
    assert "more than once" in str(error_of(text))


def test_missing_required_field() -> None:
    err = error_of(GOOD.replace("    workload: gemm\n", ""))
    assert err.field == "experiments[0].workload" and "required" in str(err)


def test_duplicate_key_is_an_error() -> None:
    err = error_of(GOOD.replace("    sites: [local]", "    sites: [local]\n    sites: [local]"))
    assert err.line == 6 and "duplicate key" in str(err)


def test_walltime_format_checked() -> None:
    err = error_of(GOOD.replace("    sites: [local]", "    sites: [local]\n    walltime: soon"))
    assert err.field == "experiments[0].walltime" and "01:30:00" in str(err)


VARIANT_SWEEP = """\
name: full
variants:
  tiny:
    sites: [local]
    walltime: "00:05:00"
    grid: {m: 8, precision: fp32}
    experiments:
      b: {grid: {k: 4}}
experiments:
  - name: a
    workload: gemm
    sites: [polaris]
    walltime: "06:00:00"
    grid: {devices: [4, 8], m: [8192, 16384]}
  - name: b
    workload: gemm
    sites: [jade2]
    grid: {m: 4096, precision: [fp16, fp32]}
"""


def test_variant_overrides_sites_walltime_and_existing_grid_keys() -> None:
    loaded = parse_sweep("s.yaml", VARIANT_SWEEP, variant="tiny")
    a, b = loaded.sweep.experiments
    assert loaded.sweep.name == "full-tiny"
    assert a.sites == ["local"] and a.walltime == "00:05:00"
    assert a.grid == {"devices": [4, 8], "m": 8}  # precision was not in a's grid: not added
    assert b.grid == {"m": 8, "precision": "fp32", "k": 4}


def test_unknown_variant_lists_the_known_ones() -> None:
    with pytest.raises(SourceError, match=r"no variant 'huge' \(variants: tiny\)"):
        parse_sweep("s.yaml", VARIANT_SWEEP, variant="huge")


def test_without_variant_the_full_sweep_is_unchanged() -> None:
    loaded = parse_sweep("s.yaml", VARIANT_SWEEP)
    assert loaded.sweep.name == "full" and loaded.sweep.experiments[0].sites == ["polaris"]
