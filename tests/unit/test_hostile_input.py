"""Hostile sweep files and metrics files: each refused with one clear reason, quickly and with
bounded memory, never a traceback (found by a run of mutated sweeps and corrupted metrics)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from orchestrator.errors import SourceError
from orchestrator.plan.render import RenderError, directive
from orchestrator.plan.sweep import parse_sweep
from orchestrator.results.ingest import parse_metrics, read_metrics

BASE = """\
name: demo
experiments:
  - name: e
    workload: {workload}
    sites: [local]
    grid:
      devices: [1]
      {grid}
"""


def sweep_error(grid: str = "m: 64", workload: str = "gemm", text: str | None = None, **options) -> str:
    with pytest.raises(SourceError) as info:
        parse_sweep("sweep.yaml", text if text is not None else BASE.format(workload=workload, grid=grid), **options)
    return str(info.value)


@pytest.mark.parametrize("grid, workload, expected", [
    ("peak_link_gbs: .nan", "allreduce", "grid.peak_link_gbs: expected a finite number"),
    ("peak_link_gbs: [1.0, .inf]", "allreduce", "grid.peak_link_gbs[1]: expected a finite number"),
    ("tag: .nan", "gemm", "grid.tag: expected a finite number"),
    ("m: 9223372036854775808", "gemm", "grid.m: expected an integer between"),
    ("tag: '-x'", "gemm", "does not start with '-'"),
    ("tag: '--help'", "gemm", "does not start with '-'"),
    ("iters: -1", "gemm", "grid.iters: expected an integer >= 1"),
    ("iters: 0", "gemm", "grid.iters: expected an integer >= 1"),
    ("warmup: -1", "gemm", "grid.warmup: expected an integer >= 0"),
    ('tag: "a\\0b"', "gemm", "grid.tag: a NUL character"),
    ("tag: " + "x" * 200_000, "gemm", "grid.tag: a value is at most 16384 characters"),
])
def test_values_the_launch_or_the_database_would_reject_are_refused_at_plan(grid: str, workload: str,
                                                                            expected: str) -> None:
    message = sweep_error(grid, workload)
    assert message.startswith("sweep.yaml:8: experiments[0].") and expected in message


def test_devices_beyond_64_bits_are_refused_not_an_overflow() -> None:
    message = sweep_error(text=BASE.format(workload="gemm", grid="m: 64").replace("devices: [1]",
                                                                                  "devices: 9223372036854775808"))
    assert "grid.devices: expected an integer between" in message


def test_deep_nesting_is_a_clear_error_not_a_recursion_error() -> None:
    for depth in (60, 100_000):
        message = sweep_error("m: " + "[" * depth + "]" * depth)
        assert "sweep.yaml:8: values nest more than 50 levels deep" in message


def test_a_list_where_a_name_was_expected_is_a_clear_error() -> None:
    text = BASE.format(workload="gemm", grid="m: 64") + "variants:\n  tiny: {experiments: {e: {walltime: 5}}}\n"
    message = sweep_error(text=text.replace("  - name: e", "  - name: [e]"), variant="tiny")
    # The experiment's own name is refused first, at its line (issue 53: before the variant is applied).
    assert "sweep.yaml:3: experiments[0].name: expected an experiment name (text), got ['e']" in message
    # Keys are checked on the composed tree, before PyYAML's constructor fails on an unhashable key.
    assert "sweep.yaml:2: expected a plain key (a name), got a list or mapping as a key" in \
        sweep_error(text="name: x\n? [a]\n: 1\n")


def test_a_long_site_name_is_a_clear_error() -> None:
    message = sweep_error(text=BASE.format(workload="gemm", grid="m: 64").replace("[local]", "[" + "a" * 300 + "]"))
    assert "experiments[0].sites: a site or system name is at most 100 characters" in message


def test_a_yaml_alias_bomb_is_refused_quickly() -> None:
    bomb = "lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for i in range(1, 10):
        bomb += f"lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    started = time.monotonic()
    message = sweep_error(text=bomb + BASE.format(workload="gemm", grid="tag: *l9"))
    assert "values once its aliases are expanded" in message
    assert time.monotonic() - started < 5
    assert "refers to a value that contains it" in sweep_error(text="a: &a [1, *a]\n")


@pytest.mark.parametrize("grid", ["m: [" + ", ".join(map(str, range(1, 1001))) + "]\n      n: ["
                                  + ", ".join(map(str, range(1, 1001))) + "]",
                                  "repeats: 1000000"])
def test_a_sweep_of_a_million_runs_is_refused_before_expanding(grid: str) -> None:
    started = time.monotonic()
    message = sweep_error(grid)
    assert "the sweep expands to 1,000,000 runs" in message and "--max-runs" in message
    assert time.monotonic() - started < 5
    assert parse_sweep("sweep.yaml", BASE.format(workload="gemm", grid=grid), max_runs=1_000_000)


def test_a_trailing_newline_cannot_reach_a_directive() -> None:
    with pytest.raises(RenderError):
        directive("gpu\n")
    assert directive("gpu") == "gpu"


GOOD = {
    "schema": "orch.metrics/1", "workload": "gemm", "precision": "fp32", "world_size": 2,
    "device": {"type": "cpu", "model": "host-cpu", "count": 2},
    "metrics": {"tflops": 1.5, "step_time_s": 0.01, "mfu": None},
    "timing": {"warmup_steps": 2, "timed_steps": 5, "step_times_s": [0.01] * 5},
    "env": {"python": "3.11", "hostnames": ["a", "b"], "scheduler_env": {"X": "1"}},
}


@pytest.mark.parametrize("text, reason", [
    (json.dumps(GOOD).replace('"tflops": 1.5', '"tflops": true'), "metrics.tflops: Input should be a valid number"),
    (json.dumps(GOOD).replace('"tflops": 1.5', '"tflops": "1e3"'), "metrics.tflops: Input should be a valid number"),
    (json.dumps(GOOD).replace('"world_size": 2', '"world_size": "2"'), "world_size: Input should be a valid integer"),
    (json.dumps(GOOD).replace('"world_size": 2', '"world_size": 9223372036854775808'),
     "world_size: Input should be less than or equal to 9223372036854775807"),
    (json.dumps(GOOD).replace('"tflops": 1.5', '"tflops": 1.5, "tflops": 9.0'), "duplicate key 'tflops'"),
    (json.dumps(GOOD).replace('"tflops": 1.5', '"tflops" : 1.5, "tflops" : 9.0'), "duplicate key 'tflops'"),
    (json.dumps(GOOD).replace('"X": "1"', '"X": "1", "X": "2"'), "duplicate key 'X'"),
    (json.dumps(GOOD)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_lax_or_hostile_metrics_are_refused(text: str, reason: str) -> None:
    metrics, outcome, _ = parse_metrics(text.encode())
    assert metrics is None and outcome.failure == "bad_metrics" and reason in (outcome.reason or "")


def test_strict_metrics_still_take_integers_for_floats_and_escaped_text() -> None:
    doc = {**GOOD, "metrics": {"tflops": 3, "step_time_s": 0.5}, "env": {"argv": ['a":b', "c"]}}
    for text in (json.dumps(doc), json.dumps(doc, indent=2), json.dumps(doc, separators=(",", " : "))):
        metrics, outcome, _ = parse_metrics(text.encode())
        assert outcome.ok and metrics is not None and metrics.metrics["tflops"] == 3.0


def test_files_that_are_not_plain_metrics_files_are_never_read(tmp_path: Path) -> None:
    import os

    link = tmp_path / "link.json"
    link.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as handle:
        handle.truncate(200 * 1024 * 1024)
    folder = tmp_path / "dir.json"
    folder.mkdir()
    started = time.monotonic()
    reasons = {path.name: read_metrics(path)[1] for path in (link, fifo, huge, folder)}
    assert time.monotonic() - started < 5  # a FIFO once blocked forever, /dev/zero never ended
    assert "symbolic link" in (reasons["link.json"].reason or "")
    assert "not a regular file" in (reasons["fifo.json"].reason or "")
    assert "over the 16 MiB limit" in (reasons["huge.json"].reason or "")
    assert "not a regular file" in (reasons["dir.json"].reason or "")
    assert {o.failure for o in reasons.values()} == {"bad_metrics"}


@pytest.mark.parametrize("sizes", ["1e400", "`id`"])
def test_a_value_the_memory_model_cannot_read_does_not_crash_the_plan(tmp_path: Path, sizes: str) -> None:
    """Found by the mutated sweeps: allreduce sizes past any float, or not numbers at all."""
    from orchestrator.plan.record import plan_sweep

    text = BASE.format(workload="allreduce", grid=f"sizes: '{sizes}'").replace("devices: [1]", "devices: [2]")
    plans = plan_sweep(parse_sweep("sweep.yaml", text), tmp_path / "runs")
    assert len(plans) == 1
