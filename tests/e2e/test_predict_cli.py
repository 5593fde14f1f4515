"""`orch predict` through the real CLI: a ranked table, JSON, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_orch


def test_predict_ranks_layouts_of_gpt2_xl_on_polaris(workdir: Path) -> None:
    out = json.loads(run_orch("predict", "--model", "gpt2-xl", "--devices", "8", "--site", "polaris", "--json",
                              cwd=workdir, check=True).stdout)
    assert out["device"] == "A100-SXM4-40GB" and out["precision"] == "bf16" and out["global_batch"] == 64
    layouts = out["layouts"]
    assert [r["rank"] for r in layouts] == list(range(1, len(layouts) + 1))
    assert all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 8 for r in layouts)
    # Data, tensor, pipeline and sequence layouts and every ZeRO stage are ranked.
    assert any(r["tp"] > 1 for r in layouts) and any(r["pp"] > 1 for r in layouts)
    assert any(r["cp"] > 1 for r in layouts) and {r["zero"] for r in layouts} == {0, 1, 2, 3}
    fits = [r["fits"] for r in layouts]
    assert fits[0] == "yes" and "NO" in fits and fits == sorted(fits, key=lambda f: f != "yes")
    assert all(r["memory_gb"] <= 40 for r in layouts if r["fits"] == "yes")
    assert all(r["memory_gb"] > 40 for r in layouts if r["fits"] == "NO")
    # Of the layouts that fit, those the gpt2 workload runs first, each group fastest first.
    fitting = [r for r in layouts if r["fits"] == "yes"]
    assert [r["runnable"] for r in fitting] == sorted((r["runnable"] for r in fitting), reverse=True)
    for runs in (True, False):
        steps = [r["step_s"] for r in fitting if r["runnable"] is runs]
        assert steps and steps == sorted(steps)
    assert all(0 < r["mfu"] < 1 for r in layouts)
    # Each layout says how the gpt2 workload runs it, or why it cannot (its own layout check).
    assert all((r["gpt2_values"] is None) != (r["gpt2_refusal"] is None) for r in layouts)
    assert all(r["gpt2"] == ("yes" if r["gpt2_values"] else "no") for r in layouts)
    assert all("2D tensor parallel" in r["gpt2_refusal"] for r in layouts if r["tp2d"])
    # gpt2-xl's 25 heads: no tensor-parallel degree of 8 devices divides them.
    assert all(r["gpt2_refusal"] for r in layouts if r["tp"] > 1)
    assert any("25 attention heads are not divisible" in r["gpt2_refusal"] for r in layouts if r["tp"] > 1)
    runnable = [r for r in layouts if r["gpt2_values"]]
    assert any(r["cp"] > 1 for r in runnable) and any(r["pp"] > 1 for r in runnable)
    assert {r["gpt2_values"]["strategy"] for r in runnable if r["cp"] > 1} <= {"ddp", "fsdp-grad-op", "fsdp-full"}


def test_predict_table(workdir: Path) -> None:
    text = run_orch("predict", "--model", "gpt2", "--devices", "4", "--site", "polaris", "--top", "5",
                    cwd=workdir, check=True).stdout
    for column in ("layout", "dp", "tp", "pp", "cp", "zero", "recompute", "step s", "tokens/s", "GB/device",
                   "fits?", "MFU", "gpt2"):
        assert column in text
    assert "gpt2 on 4 x A100-SXM4-40GB (polaris)" in text and "more layout(s)" in text
    assert "measure layout " in text and "with the gpt2 workload: grid {model: gpt2, devices: 4" in text


def test_every_layout_predict_ranks_for_tiny_runs_and_is_measured(workdir: Path) -> None:
    """The layouts `orch predict` ranks for the tiny model on 2 local devices (data, tensor, pipeline
    and context parallel) run as a sweep from their gpt2_values, and prediction_error sets each
    run's predicted step time beside the measured one."""
    out = json.loads(run_orch("predict", "--model", "tiny", "--devices", "2", "--site", "local", "--seq-len", "32",
                              "--batch-size", "2", "--precision", "fp32", "--json", cwd=workdir, check=True).stdout)
    chosen = [r for r in out["layouts"] if r["zero"] == 0 and r["recompute"] == "no"]
    assert sorted((r["dp"], r["tp"], r["pp"], r["cp"]) for r in chosen) == [
        (1, 1, 1, 2), (1, 1, 2, 1), (1, 2, 1, 1), (2, 1, 1, 1)]
    assert all(r["gpt2_values"] for r in chosen), [r["gpt2_refusal"] for r in chosen]
    experiments = "".join(
        f"  - name: l{r['rank']}\n    workload: gpt2\n    sites: [local]\n    walltime: '00:05:00'\n"
        f"    grid: {json.dumps({**r['gpt2_values'], 'model': 'tiny', 'devices': 2, 'precision': 'fp32'})}\n"
        for r in chosen)
    sweep = workdir / "layouts.yaml"
    sweep.write_text("name: layouts\nexperiments:\n" + experiments.replace(
        '"precision": "fp32"}', '"precision": "fp32", "batch_size": 2, "seq_len": 32, "vocab_size": 256, '
        '"warmup": 1, "iters": 2}'))
    run_orch("run", str(sweep), "--interval", "0.5", cwd=workdir, check=True, timeout=600)
    rows = json.loads(run_orch("sql", "-f", "json",
                               "SELECT r.run_id, r.status, mv.name, mv.value FROM results r "
                               "JOIN attempts a ON a.run_id = r.run_id JOIN metric_values mv ON mv.attempt_id = a.id "
                               "WHERE mv.name IN ('dp', 'tp', 'pp', 'cp')", cwd=workdir, check=True).stdout)
    measured: dict[str, dict[str, float]] = {}
    for row in rows:
        assert row["status"] == "completed", row
        measured.setdefault(row["run_id"], {})[row["name"]] = row["value"]
    assert sorted((m["dp"], m["tp"], m["pp"], m["cp"]) for m in measured.values()) == sorted(
        (r["dp"], r["tp"], r["pp"], r["cp"]) for r in chosen)
    errors = json.loads(run_orch("sql", "-f", "json", "SELECT predicted_step_s, measured_step_s FROM "
                                 "prediction_error", cwd=workdir, check=True).stdout)
    assert len(errors) == 4 and all(e["predicted_step_s"] > 0 and e["measured_step_s"] > 0 for e in errors)


def test_predict_errors_are_one_line(workdir: Path) -> None:
    cases = [
        (("--model", "gpt5", "--devices", "8", "--site", "polaris"), "unknown model 'gpt5'"),
        (("--model", "gpt2", "--devices", "8", "--site", "atlantis"), "unknown site 'atlantis'"),
        (("--model", "gpt2", "--devices", "6", "--site", "polaris"), "does not fill whole nodes of 4"),
        (("--model", "gpt2", "--devices", "0", "--site", "polaris"), "--devices"),
        (("--model", "gpt2", "--devices", "4", "--site", "jade2", "--precision", "bf16"), "runs fp32, fp16"),
    ]
    for args, message in cases:
        done = run_orch("predict", *args, cwd=workdir)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_gpt3_175b_on_1024_polaris_devices_and_its_time_to_train(workdir: Path) -> None:
    """Study E's GPT-3 175B (the time model's own preset) on 1024 devices: every layout splits
    them all, each with a positive time to train 300B tokens, and the step's parts sum to it."""
    out = json.loads(run_orch("predict", "--model", "gpt3-175b", "--devices", "1024", "--site", "polaris",
                              "--tokens", "300B", "--json", cwd=workdir, check=True).stdout)
    assert out["shape"] == {"layers": 96, "hidden": 12288, "heads": 96, "vocab": 51200, "seq": 2048,
                            "workload_preset": False}
    layouts = out["layouts"]
    assert layouts and all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 1024 for r in layouts)
    assert out["tokens"] == 300e9 and out["price_per_device_hour"] > 0
    for r in layouts:
        train = r["time_to_train"]
        steps = -(-300e9 // (out["global_batch"] * 2048))
        assert train["steps"] == steps and train["hours"] == pytest.approx(steps * r["step_s"] / 3600, rel=1e-5)
        assert train["days"] > 0 and train["device_hours"] == pytest.approx(train["hours"] * 1024)
        assert train["cost"] == pytest.approx(train["device_hours"] * out["price_per_device_hour"])
        assert set(r["breakdown"]) == {"compute", "tensor_parallel", "context_parallel", "pipeline_parallel",
                                       "bubble", "data_parallel", "optimizer", "overhead"}
        assert sum(r["breakdown"].values()) == pytest.approx(r["step_s"], abs=1e-6)
        # No gpt2 preset: memory from the formula, said so; nothing the gpt2 workload measures.
        assert r["memory_from"].startswith("formula (no trace") and r["gpt2"] == "no"
        assert isinstance(r["runnable"], bool)
    fitting = [r for r in layouts if r["fits"] == "yes"]
    assert fitting[0]["runnable"] and any(not r["runnable"] for r in fitting)
    assert [r["runnable"] for r in fitting] == sorted((r["runnable"] for r in fitting), reverse=True)


def test_runnable_lists_only_what_the_workload_runs(workdir: Path) -> None:
    every = json.loads(run_orch("predict", "--model", "gpt2-xl", "--devices", "8", "--site", "polaris", "--json",
                                cwd=workdir, check=True).stdout)["layouts"]
    only = json.loads(run_orch("predict", "--model", "gpt2-xl", "--devices", "8", "--site", "polaris", "--json",
                               "--runnable", cwd=workdir, check=True).stdout)["layouts"]
    assert only and all(r["runnable"] and r["gpt2_values"] for r in only)
    assert [r["rank"] for r in only] == list(range(1, len(only) + 1))
    assert {r["layout"] for r in only} == {r["layout"] for r in every if r["runnable"]}
    assert len(only) < len(every)
    text = run_orch("predict", "--model", "gpt3-1t", "--devices", "512", "--site", "polaris", "--runnable",
                    "--tokens", "1T", "--top", "3", cwd=workdir, check=True).stdout
    for column in ("runnable", "days", "device-h", "cost USD"):
        assert column in text
    assert "vocab 51200" in text and "time to train 1e+12 tokens" in text
    big = json.loads(run_orch("predict", "--model", "gpt3-1t", "--devices", "512", "--site", "polaris", "--runnable",
                              "--json", cwd=workdir, check=True).stdout)["layouts"]
    assert big and all(r["runnable"] and r["runnable_refusal"] is None and not r["tp2d"] for r in big)
    assert all(160 % r["tp"] == 0 for r in big)  # the workload's check: tp divides the heads


def test_custom_shape_and_breakdown_table(workdir: Path) -> None:
    args = ("--layers", "24", "--hidden", "2048", "--heads", "16", "--vocab", "32000", "--seq", "4096",
            "--devices", "8", "--site", "polaris")
    out = json.loads(run_orch("predict", *args, "--json", cwd=workdir, check=True).stdout)
    assert out["model"] == "custom" and out["seq_len"] == 4096
    assert out["shape"] == {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 32000, "seq": 4096,
                            "workload_preset": False}
    assert all(r["memory_from"] == "formula (no trace: a custom shape)" for r in out["layouts"])
    assert all(r["time_to_train"] is None for r in out["layouts"])
    text = run_orch("predict", *args, "--breakdown", "--top", "3", cwd=workdir, check=True).stdout
    for column in ("compute s", "tensor_parallel s", "pipeline_parallel s", "bubble s", "data_parallel s",
                   "optimizer s", "overhead s"):
        assert column in text
    assert "shape: 24 layers, hidden 2048, 16 heads, vocab 32000" in text


def test_bad_custom_shapes_are_one_line_errors(workdir: Path) -> None:
    where = ("--devices", "8", "--site", "polaris")
    cases = [
        (("--layers", "24", "--hidden", "2048"), "missing --heads, --vocab, --seq"),
        (("--layers", "24", "--hidden", "2048", "--heads", "12", "--vocab", "32000", "--seq", "1024"),
         "--hidden 2048 is not divisible by --heads 12"),
        (("--layers", "0", "--hidden", "2048", "--heads", "16", "--vocab", "32000", "--seq", "1024"),
         "--layers 0: expected a whole number >= 1"),
        (("--model", "gpt2", "--layers", "24"), "give a preset or a custom shape, not both"),
        ((), "give --model (a preset) or a custom shape"),
        (("--model", "gpt2", "--tokens", "lots"), "--tokens 'lots'"),
    ]
    for args, message in cases:
        done = run_orch("predict", *args, *where, cwd=workdir)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
