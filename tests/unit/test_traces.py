"""Which traces a memory prediction is made of (orchestrator/predict/traces.py), without tracing anything:
what a plan traces ahead, side by side, must be exactly what each run's prediction reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.predict import traces
from orchestrator.predict.memory import Inputs

BASE = {"batch_size": 4, "seq_len": 64, "vocab_size": 512}


def _inputs(**values: object) -> Inputs:
    return Inputs.of({**BASE, **values})


CASES = {
    "ddp, shallow": _inputs(model="gpt-micro", strategy="ddp", devices=1),
    "ddp, deep, 8 ranks": _inputs(model="gpt2", strategy="ddp", devices=8, precision="bf16"),
    "fsdp-full, 32 ranks, deep": _inputs(model="gpt2-xl", strategy="fsdp-full", devices=32, grad_accum=12),
    "fsdp-grad-op, 4 ranks": _inputs(model="gpt-mini", strategy="fsdp-grad-op", devices=4),
    "zero3, 16 ranks": _inputs(model="gpt2-medium", strategy="zero3", devices=16, precision="fp16"),
    "zero1, 1 rank, fp32": _inputs(model="tiny", strategy="zero1", devices=1),
}


@pytest.mark.parametrize("name", CASES)
def test_a_prediction_reads_exactly_its_listed_leaves(name: str) -> None:
    inputs = CASES[name]
    asked: list[Inputs] = []

    def value(leaf: Inputs) -> int:
        asked.append(leaf)
        return 1_000_000 * leaf.cfg.n_layer + 1_000 * leaf.devices + leaf.accum

    traces.combine(inputs, value)
    assert set(asked) == set(traces.leaves(inputs))
    for leaf in asked:  # every leaf is small: a few layers, a few ranks, a few micro-batches
        assert leaf.cfg.n_layer <= traces.EXTRAPOLATE_ABOVE and leaf.devices <= 4 and leaf.accum <= 4


def test_runs_that_hold_the_same_bytes_share_their_leaves() -> None:
    ddp = _inputs(model="gpt2", strategy="ddp", precision="bf16")
    # A DDP rank holds the same on 2 ranks as on 64; 40 micro-batches as 4.
    assert traces.leaves(replace(ddp, devices=64, accum=40)) == traces.leaves(replace(ddp, devices=2, accum=4))
    assert traces.leaves(replace(ddp, devices=1)) != traces.leaves(replace(ddp, devices=2))
    # DeepSpeed's stages, rank counts and accumulation share one traced forward/backward per model.
    zero = {traces.leaves(replace(ddp, strategy=s, devices=d, accum=a)).__repr__()
            for s in ("zero1", "zero2", "zero3") for d in (1, 8) for a in (1, 6)}
    assert len(zero) == 1
    # FSDP beyond 4 ranks reads the 2- and 4-rank traces, whatever N.
    fsdp = replace(ddp, strategy="fsdp-full")
    assert traces.leaves(replace(fsdp, devices=8)) == traces.leaves(replace(fsdp, devices=32))


def test_depth_and_ranks_extrapolate_linearly() -> None:
    deep = _inputs(model="gpt2-xl", strategy="fsdp-full", devices=16)  # 48 layers

    def value(leaf: Inputs) -> int:  # a + b/N per rank, c per layer
        return 5_000 + 64_000 // leaf.devices + 300 * leaf.cfg.n_layer

    assert traces.combine(deep, value) == 5_000 + 64_000 // 16 + 300 * 48


def test_zero3_partitions_only_parameters_above_deepspeeds_threshold() -> None:
    from workloads.models.configs import param_sizes

    run = Inputs.of({"model": "gpt2", "strategy": "zero3", "devices": 2})
    sizes = param_sizes(run.cfg)
    big = sum(n for n in sizes if n > traces.DS_PERSISTENCE_THRESHOLD)  # the matrices, not biases or norms
    assert 0 < big < sum(sizes)
    # The ZeRO-3 base: the traced forward/backward less the other half of those weights and
    # gradients (1/2 kept on 2 ranks), plus what it gathers (gpt2's largest matrix and the prefetch
    # bucket) and the reduce bucket, all in fp32's 4 bytes.
    gathered = traces.deepspeed_gathered(run)
    assert gathered == min(big, max(sizes) + traces.DS_PREFETCH_BUCKET)
    assert traces.deepspeed_base(run, 10**10) == (10**10 - 2 * 4 * big * 0.5 + 4 * gathered
                                                  + traces.DS_REDUCE_BUCKET * 4)
    assert traces.deepspeed_base(replace(run, strategy="zero2"), 10**10) == 10**10 + traces.DS_REDUCE_BUCKET * 4


def test_context_parallel_traces_one_group_and_extrapolates_fsdp_from_one_and_two_replicas() -> None:
    ddp = _inputs(model="gpt2", strategy="ddp", devices=16, cp=4)
    assert [leaf.devices for leaf in traces.leaves(ddp)] == [4, 4]  # one cp group, at 2 and 3 layers
    fsdp = replace(ddp, strategy="fsdp-full")
    assert sorted({leaf.devices for leaf in traces.leaves(fsdp)}) == [4, 8]  # dp 1 and 2

    def value(leaf: Inputs) -> int:  # a + b/N per rank, c per layer
        return 7_000 + 64_000 // leaf.devices + 300 * leaf.cfg.n_layer

    assert traces.combine(fsdp, value) == 7_000 + 64_000 // 16 + 300 * 12


def test_tensor_parallel_ddp_traces_two_replicas() -> None:
    tp = _inputs(model="gpt2", strategy="ddp", devices=32, tp=4, sequence_parallel=True)
    assert {leaf.devices for leaf in traces.leaves(tp)} == {8}  # tp 4 x dp 2
    assert traces.leaves(tp) == traces.leaves(replace(tp, devices=8))
    assert traces.leaves(tp) != traces.leaves(replace(tp, sequence_parallel=False))


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("devices", [1, 2, 8, 16, 32, 256])
def test_deepspeed_is_never_below_its_sharded_states(strategy: str, precision: str, devices: int) -> None:
    """Issue 25: the fitted (23.06, -3.27) of ZeRO-3 bf16 went below the sharded states past ~7 ranks,
    then below zero. With DeepSpeed's documented states and buffers, however many ranks, the
    prediction holds at least ``states.model_state_bytes`` (forward/backward given its own least:
    the whole weights and gradients in DeepSpeed's dtype, no activations)."""
    from orchestrator.predict.states import model_state_bytes
    from workloads.models.configs import total_params

    run = Inputs.of({"model": "gpt2-xl", "strategy": strategy, "devices": devices, "precision": precision})
    n = total_params(run.cfg)
    least_forward_backward = 2 * (4 if precision == "fp32" else 2) * n
    predicted = traces.deepspeed_bytes(run, least_forward_backward)
    assert predicted >= model_state_bytes(n, strategy, devices, precision)


def test_deepspeeds_optimizer_step_is_a_phase_of_its_own() -> None:
    """ZeRO-3's step converts the rank's gradient partition (sub-groups of 1e9 elements) to fp32:
    a flat 16-bit copy and its fp32 conversion live together (6 bytes an element), then the fp32
    gradient and torch AdamW's foreach temporary (8). With no activations to speak of, that phase
    is the peak: the sharded states, those 8 bytes per partition element, the reduce bucket."""
    from orchestrator.predict import zero_step
    from orchestrator.predict.states import model_state_bytes
    from workloads.models.configs import total_params

    run = Inputs.of({"model": "gpt2-xl", "strategy": "zero3", "devices": 8, "precision": "fp16"})
    n = total_params(run.cfg)
    step = 16 * n / 8 + 8 * (n / 8) + traces.DS_REDUCE_BUCKET * 2
    assert traces.deepspeed_step(run) == pytest.approx(step)
    assert traces.deepspeed_bytes(run, 2 * 2 * n) == int(step)  # the backward phase is the smaller
    busy = 10 * step  # activations that dwarf the step: the backward is the peak
    assert traces.deepspeed_bytes(run, int(busy)) > step
    # Sub-groups bound what one call converts; ZeRO-1/2 convert the whole partition.
    assert zero_step.step_elements(3e9, stage=3) == zero_step.DS_SUB_GROUP_SIZE
    assert zero_step.step_elements(3e9, stage=2) == 3e9
    # FusedAdam (no temporary): the conversion's flat copy + fp32 (6 bytes) is the larger; fp32
    # training: the flat copy is the fp32 gradient.
    assert zero_step.step_bytes(10, 2, foreach_optimizer=False) == 60
    assert zero_step.step_bytes(10, 4, foreach_optimizer=False) == 40
    assert zero_step.step_bytes(10, 4, foreach_optimizer=True) == 80
    assert model_state_bytes(n, "zero3", 8, "bf16") == 16 * n / 8
