"""gpt2 layouts that can be run and checked (issue 11, item 4): tensor parallel, pipeline parallel,
sequence parallel, context parallel and activation checkpointing, tiny, with gloo on CPU.

A tp/pp run builds the same weights from the same seed as the plain run and reads the same data
(ranks of one replica share it), so its losses after two optimiser steps equal the plain run's:
the first step's loss checks the forward, the second's the gradients and update of the first.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator.predict import memory
from tests.workloads.workload_helpers import load_valid, run_module, undocumented
from workloads import layouts

# Two steps, no warm-up: the reported loss is the second step's, after one update.
TINY = ["--model", "tiny", "--batch-size", "2", "--seq-len", "32", "--warmup", "0", "--iters", "2",
        "--vocab-size", "256"]
# How far the formula (memory.gpt_training) may be from a measured peak where tracing cannot go: its
# activation terms are Korthikanti et al.'s, not the program's (docs/guide.md, "Predicted memory").
FORMULA_WITHIN = 0.25
# Larger activations than weights, so that checkpointing shows in the peak.
ACTIVATIONS = ["--model", "tiny", "--batch-size", "4", "--seq-len", "128", "--warmup", "0", "--iters", "2",
               "--vocab-size", "256", "--attention", "manual"]


@pytest.fixture(autouse=True)
def _memory_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_MEMORY_CACHE", str(tmp_path / "memory-cache"))  # traces of this test alone


def _run(tmp: Path, args: list[str], nproc: int = 1) -> dict[str, Any]:
    out = tmp / "metrics.json"
    run_module("workloads.gpt2", [*args, "--output", str(out)], nproc=nproc, timeout=300)
    doc = load_valid(out)
    assert not undocumented(doc["metrics"]), undocumented(doc["metrics"])
    return doc


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """The one-rank runs the layouts must reproduce, by micro-batches per step."""
    return {accum: _run(tmp_path_factory.mktemp(f"plain{accum}"), [*TINY, "--grad-accum", str(accum)])
            for accum in (1, 2)}


def _same_loss(doc: dict[str, Any], reference: dict[str, Any]) -> None:
    """The same loss as the plain run, and the same per-step loss series (series.loss: read on every
    rank after the timed steps, the last stage's with pipeline stages, the group's mean with cp)."""
    assert math.isclose(doc["metrics"]["loss"], reference["metrics"]["loss"], rel_tol=1e-5), (
        doc["metrics"]["loss"], reference["metrics"]["loss"])
    mine, theirs = doc["series"]["loss"], reference["series"]["loss"]
    assert mine["steps"] == theirs["steps"] == list(range(1, doc["params"]["iters"] + 1))
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(mine["values"], theirs["values"])), (mine, theirs)


@pytest.mark.slow
def test_tensor_parallel_matches_the_plain_run(tmp_path: Path, plain: dict[int, dict[str, Any]]) -> None:
    doc = _run(tmp_path, [*TINY, "--tp", "2"], nproc=2)
    _same_loss(doc, plain[1])
    m = doc["metrics"]
    assert (m["tp"], m["pp"], m["dp"], m["microbatches"]) == (2, 1, 1, 1)
    # One replica: the work of a step is one rank's batch, though two ranks run it.
    assert m["tokens_per_step"] == 2 * 32 and m["global_batch"] == 2
    assert math.isclose(m["tflops_per_device"] * 2, m["tflops"], rel_tol=1e-9)
    assert doc["params"]["tp"] == 2
    _trace_predicts_the_peak(doc)


def _plan_values(doc: dict[str, Any]) -> dict[str, Any]:
    """The sweep values a plan would predict the measured run's memory from."""
    p, m = doc["params"], doc["metrics"]
    return {"model": "tiny", "batch_size": p["batch_size"], "seq_len": p["seq_len"], "vocab_size": 256,
            "attention": p["attention"], "devices": m["dp"] * m["cp"] * m["tp"] * m["pp"], "precision": "fp32",
            "strategy": p["strategy"], "cp": p["cp"], "tp": p["tp"], "pp": p["pp"],
            "microbatches": m["microbatches"], "pp_schedule": p["pp_schedule"],
            "sequence_parallel": p["sequence_parallel"], "activation_checkpointing": p["activation_checkpointing"]}


def _trace_predicts_the_peak(doc: dict[str, Any]) -> None:
    """The memory trace of the same layout (DTensor-sharded model on a fake mesh, or the sequence
    slices with their gathers) predicts the rank's measured peak_tensor_bytes within 2%."""
    predicted = memory.program_bytes("gpt2", _plan_values(doc))
    measured = doc["metrics"]["peak_tensor_bytes"]
    assert predicted is not None and abs(predicted - measured) <= 0.02 * measured, (predicted, measured)


def _formula_predicts_the_peak(doc: dict[str, Any], within: float) -> None:
    """Where tracing cannot go (pipeline stages; FSDP over a tensor-parallel mesh), the plan's
    prediction is the formula's (``memory.gpt_training``), and says so (``mem_from`` formula): it is
    within ``within`` of the measured peak_tensor_bytes (the largest rank's)."""
    predicted, source = memory.predicted("gpt2", _plan_values(doc), memory.gpt_training)
    measured = doc["metrics"]["peak_tensor_bytes"]
    assert source == memory.FROM_FORMULA
    assert abs(predicted - measured) <= within * measured, (predicted, measured, (predicted - measured) / measured)


@pytest.mark.slow
def test_sequence_parallel_fsdp_and_checkpointing_match_the_plain_run(
        tmp_path: Path, plain: dict[int, dict[str, Any]]) -> None:
    doc = _run(tmp_path, [*TINY, "--tp", "2", "--sequence-parallel", "true", "--activation-checkpointing",
                          "full", "--strategy", "fsdp-full"], nproc=2)
    _same_loss(doc, plain[1])
    assert doc["params"]["sequence_parallel"] is True and doc["params"]["activation_checkpointing"] == "full"
    _formula_predicts_the_peak(doc, within=FORMULA_WITHIN)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_pipeline_matches_gradient_accumulation(tmp_path: Path, plain: dict[int, dict[str, Any]],
                                                schedule: str) -> None:
    """Two stages over two micro-batches (the default, pp) reproduce grad_accum 2 on one rank;
    the loss is the last stage's, sent to rank 0 which writes it."""
    doc = _run(tmp_path, [*TINY, "--pp", "2", "--pp-schedule", schedule], nproc=2)
    _same_loss(doc, plain[2])
    m = doc["metrics"]
    assert (m["tp"], m["pp"], m["dp"], m["microbatches"]) == (1, 2, 1, 2)
    assert m["tokens_per_step"] == plain[2]["metrics"]["tokens_per_step"] == 2 * 32 * 2
    _formula_predicts_the_peak(doc, within=FORMULA_WITHIN)


@pytest.mark.slow
def test_tensor_parallel_replicas_average_their_gradients(tmp_path: Path) -> None:
    """tp 2 x dp 2 on 4 ranks (sequence parallel) against ddp on 2: rank 0 reads replica 0's data in
    both, and its second loss depends on the first update, i.e. on both replicas' gradients averaged."""
    ddp = _run(tmp_path / "ddp", TINY, nproc=2)
    doc = _run(tmp_path / "tp", [*TINY, "--tp", "2", "--sequence-parallel", "true"], nproc=4)
    _same_loss(doc, ddp)
    m = doc["metrics"]
    assert (m["tp"], m["dp"]) == (2, 2) and m["tokens_per_step"] == ddp["metrics"]["tokens_per_step"] == 2 * 32 * 2
    _trace_predicts_the_peak(doc)


@pytest.mark.slow
def test_tensor_and_pipeline_parallel_together(tmp_path: Path, plain: dict[int, dict[str, Any]]) -> None:
    """tp 2 x pp 2 with sequence parallel on 4 ranks: DTensor stages, the tied embedding and head
    sharded on two stages, their gradients summed between them."""
    doc = _run(tmp_path, [*TINY, "--tp", "2", "--pp", "2", "--sequence-parallel", "true"], nproc=4)
    _same_loss(doc, plain[2])
    assert (doc["metrics"]["tp"], doc["metrics"]["pp"], doc["metrics"]["dp"]) == (2, 2, 1)
    _formula_predicts_the_peak(doc, within=FORMULA_WITHIN)


@pytest.mark.slow
def test_context_parallel_matches_the_plain_run_and_the_trace_predicts_its_peak(
        tmp_path: Path, plain: dict[int, dict[str, Any]]) -> None:
    """cp 2: each rank computes 16 of the 32 tokens of every sequence, attending to the other rank's
    keys and values: the plain run's losses (the forward's mask and positions, the gathered keys'
    gradients), and the peak the trace of the same program predicts."""
    doc = _run(tmp_path, [*TINY, "--cp", "2"], nproc=2)
    _same_loss(doc, plain[1])
    m = doc["metrics"]
    assert (m["cp"], m["dp"], m["tp"], m["pp"]) == (2, 1, 1, 1)
    assert m["tokens_per_step"] == plain[1]["metrics"]["tokens_per_step"] == 2 * 32  # one replica
    _trace_predicts_the_peak(doc)


@pytest.mark.slow
def test_context_parallel_replicas_with_manual_attention_and_checkpointing(tmp_path: Path) -> None:
    """cp 2 x dp 2 on 4 ranks against ddp on 2: rank 0's second loss depends on both replicas'
    gradients; minGPT's attention with the shifted causal mask, blocks recomputed in the backward."""
    manual = [*TINY, "--attention", "manual"]
    ddp = _run(tmp_path / "ddp", manual, nproc=2)
    doc = _run(tmp_path / "cp", [*manual, "--cp", "2", "--activation-checkpointing", "full"], nproc=4)
    _same_loss(doc, ddp)
    assert (doc["metrics"]["cp"], doc["metrics"]["dp"]) == (2, 2)
    assert doc["metrics"]["tokens_per_step"] == ddp["metrics"]["tokens_per_step"]


@pytest.mark.slow
def test_context_parallel_under_fsdp(tmp_path: Path) -> None:
    """FSDP2 initialises each shard itself, so its weights depend on the ranks: the first step's loss
    (before any update) of cp 2 on 2 ranks equals FSDP's on 2 ranks, whose rank 0 reads the same data."""
    first = [*TINY, "--iters", "1", "--strategy", "fsdp-full"]
    fsdp = _run(tmp_path / "fsdp", first, nproc=2)
    doc = _run(tmp_path / "cp", [*first, "--cp", "2"], nproc=2)
    _same_loss(doc, fsdp)


@pytest.mark.slow
def test_checkpointing_lowers_the_measured_peak_and_the_trace_predicts_it(
        tmp_path: Path) -> None:
    peaks: dict[str, float] = {}
    losses: dict[str, float] = {}
    for mode in ("none", "full"):
        doc = _run(tmp_path, [*ACTIVATIONS, "--activation-checkpointing", mode])
        peaks[mode] = doc["metrics"]["peak_tensor_bytes"]
        losses[mode] = doc["metrics"]["loss"]
        # The traced prediction follows the model's checkpointing (it runs the same blocks).
        p = {"model": "tiny", "batch_size": 4, "seq_len": 128, "vocab_size": 256, "attention": "manual",
             "devices": 1, "precision": "fp32", "strategy": "ddp", "activation_checkpointing": mode}
        predicted = memory.program_bytes("gpt2", p)
        assert predicted is not None and abs(predicted - peaks[mode]) <= 0.1 * peaks[mode], (mode, predicted, peaks)
    assert peaks["full"] < 0.8 * peaks["none"], peaks
    assert math.isclose(losses["full"], losses["none"], rel_tol=1e-6)  # recomputation changes no value


def test_layout_refusals_say_what_cannot_run() -> None:
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"tp": 2, "strategy": "zero2"}, 2, "DeepSpeed ZeRO"),
        ({"pp": 2, "strategy": "fsdp-full"}, 2, "pp > 1 is not supported"),
        ({"sequence_parallel": True}, 2, "needs tensor parallelism"),
        ({"tp": 3}, 3, "heads are not divisible by tp 3"),
        ({"tp": 2}, 3, "not a multiple of tp x pp"),
        ({"pp": 3}, 3, "at most one stage per layer"),
        ({"pp": 2, "microbatches": 1}, 2, "1F1B needs at least as many micro-batches"),
        ({"pp": 2, "microbatches": 3, "grad_accum": 2}, 2, "disagree"),
        ({"microbatches": 3}, 1, "without pipeline parallelism"),
        ({"tp": 2, "dropout": 0.1}, 2, "dropout with tp > 1"),
        ({"pp": 2, "precision": "fp16"}, 2, "fp16 with pp > 1"),
        ({"tp": 2, "sequence_parallel": True, "seq_len": 33}, 2, "seq_len 33 is not divisible"),
        ({"cp": 2, "tp": 2}, 4, "context parallel runs with data parallel only"),
        ({"cp": 2, "pp": 2}, 4, "context parallel runs with data parallel only"),
        ({"cp": 2, "strategy": "zero3"}, 2, "does not combine with cp"),
        ({"cp": 4, "seq_len": 30}, 4, "seq_len 30 is not divisible by cp 4"),
        ({"cp": 2}, 3, "not a multiple of tp x pp x cp"),
        ({"cp": 2, "compile": True}, 2, "compile with cp"),
        ({"cp": 0}, 2, "must be at least 1"),
        ({"zero_grad": "zeros", "strategy": "zero2"}, 2, "DeepSpeed's engine clears its own gradient"),
        ({"zero_grad": "sometimes"}, 1, "zero_grad 'sometimes': expected one of none, zeros"),
    ]
    for p, world, message in cases:
        with pytest.raises(layouts.LayoutError, match=message):
            layouts.resolve(p, world, n_layer=2, n_head=2)


def test_layout_degrees_and_micro_batches() -> None:
    layout = layouts.resolve({"tp": 2, "pp": 2}, 8, n_layer=4, n_head=4)
    assert (layout.dp, layout.microbatches) == (2, 2)  # micro-batches default to pp
    assert layouts.resolve({"pp": 2, "grad_accum": 4}, 2).microbatches == 4  # or to grad_accum
    assert layouts.resolve({"pp": 2, "pp_schedule": "gpipe", "microbatches": 1}, 2).microbatches == 1
    # tp innermost: ranks 0-1 are one tensor-parallel group, 0 and 2 two replicas of stage 0.
    assert [layout.coords(r) for r in (0, 1, 2, 4)] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]
    assert layouts.stage_bounds(5, 2) == [(0, 3), (3, 5)]
    # Context parallel: neighbouring ranks share each sequence, and read their replica's data.
    cp = layouts.resolve({"cp": 2}, 8)
    assert (cp.dp, cp.cp, cp.world) == (4, 2, 8)
    assert [cp.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [cp.cp_rank(r) for r in range(4)] == [0, 1, 0, 1]


def test_the_workload_refuses_in_one_line() -> None:
    proc = run_module("workloads.gpt2", [*TINY, "--tp", "2", "--strategy", "zero1"], check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "zero1 (DeepSpeed ZeRO) does not combine with tp/pp" in proc.stderr.strip().splitlines()[-1]


def test_context_parallel_memory_formula_divides_the_tokens() -> None:
    """Where the trace is off (ORCH_MEMORY_TRACE=0, no torch), cp's formula: a rank's tokens are
    seq/cp, plus the keys and values it gathers; the states as data parallel over all ranks."""
    base = {"model": "gpt2", "batch_size": 8, "seq_len": 4096, "precision": "bf16", "strategy": "fsdp-full",
            "devices": 8}
    cp = memory.gpt_training({**base, "cp": 4})
    assert cp < memory.gpt_training(base)
    assert cp > memory.gpt_training({**base, "seq_len": 1024})  # the gathered keys and values


def test_memory_of_a_pipeline_or_fsdp_tensor_layout_is_the_formula() -> None:
    """What cannot run on fake tensors (pipeline stages, FSDP over a tensor-parallel mesh) gets the
    analytic formula, which divides weights and activations as the layout does."""
    base = {"model": "gpt2", "batch_size": 8, "seq_len": 1024, "precision": "bf16", "strategy": "ddp",
            "devices": 8}
    tp = {**base, "tp": 8}
    for untraced in ({**base, "pp": 2}, {**tp, "strategy": "fsdp-full"}):
        assert memory.program_bytes("gpt2", untraced) is None
        assert memory.predicted_bytes("gpt2", untraced, memory.gpt_training) == memory.gpt_training(untraced)
    plain = memory.gpt_training(base)
    assert memory.gpt_training(tp) < plain
    assert memory.gpt_training({**tp, "sequence_parallel": True}) < memory.gpt_training(tp)
    assert memory.gpt_training({**tp, "activation_checkpointing": "full"}) < memory.gpt_training(tp)
    assert memory.gpt_training({**base, "pp": 4}) < plain
    gpipe = {**base, "pp": 4, "microbatches": 16, "pp_schedule": "gpipe"}
    assert memory.gpt_training(gpipe) > memory.gpt_training({**gpipe, "pp_schedule": "1f1b"})  # all in flight
