"""The analytic memory model's program and framework terms (benchmarks/analytic_memory.py,
issue 25): what each term holds, checked by hand on real shapes, and when in the backward it lives."""

from __future__ import annotations

from dataclasses import replace

from benchmarks.analytic_memory import Run, Shape, backward_peak, step_terms, terms

LLAMA3_8B = Shape(layers=32, hidden=4096, heads=32, vocab=128256, seq=2048, ffn=14336, kv_heads=8, gated=True,
                  program="hf-llama")
ZERO3 = Run(dp=8, strategy="zero3", micro_batch=1, precision="fp16", reduce_bucket=500_000_000)


def test_the_loss_and_the_recomputed_layer_are_never_live_together() -> None:
    parts = {"states": 10.0, "activations": 3.0, "logits": 5.0, "final_norm": 1.0, "recomputed_layer": 4.0}
    assert backward_peak(parts) == 10 + 3 + max(5 + 1, 4)
    parts["recomputed_layer"] = 9.0
    assert backward_peak(parts) == 10 + 3 + 9
    # without recompute (no such term) the loss's moment is every term
    assert backward_peak({"states": 10.0, "activations": 3.0, "logits": 5.0}) == 18


def test_zero3_without_zero_init_keeps_every_gathered_linear_weight() -> None:
    """DeepSpeed v0.14.2 without zero.Init: torch's F.linear saves a view of each gathered 16-bit
    weight, so the whole model's linear weights (32 layers of Llama-3-8B: 2 x 6,979,321,856 bytes) and
    the head (2 x 128256 x 4096) outlive their release until their backward; with reentrant
    checkpointing the forward runs without grad: one recomputed layer's and the head's."""
    kept = terms(LLAMA3_8B, replace(ZERO3, kept_gathered_weights=True))["zero3_kept_weights"]
    assert kept == 13_958_643_712 + 1_050_673_152
    checkpointed = terms(LLAMA3_8B, replace(ZERO3, kept_gathered_weights=True, recompute="full"))
    assert checkpointed["zero3_kept_weights"] == 2 * (13_958_643_712 // 32 // 2) + 1_050_673_152
    assert "zero3_kept_weights" not in terms(LLAMA3_8B, ZERO3)  # under zero.Init: released


def test_hf_llama_keeps_its_kv_cache_only_without_checkpointing() -> None:
    """transformers 4.40 trains with use_cache=True unless checkpointing forces it off: k and v of
    every layer, 16-bit, 1024 wide each for Llama-3-8B's 8 kv heads."""
    cache = terms(LLAMA3_8B, ZERO3)["kv_cache"]
    assert cache == 2 * 2 * 1024 * 32 * 2048
    assert "kv_cache" not in terms(LLAMA3_8B, replace(ZERO3, recompute="full"))


def test_freed_gradients_leave_the_backward_start_and_a_foreach_step_adds_one_parameter_copy() -> None:
    shape = replace(LLAMA3_8B, program="torchtune", seq=4096)
    run = Run(dp=1, strategy="ddp", micro_batch=2, precision="bf16", pure16=True, foreach_step=True)
    params = 32 * shape.layer_params() + shape.embedding_params()
    assert terms(shape, run)["states"] == 8 * params
    assert terms(shape, replace(run, fresh_grads=True))["states"] == 6 * params
    step = step_terms(shape, run)
    assert step == {"states": 8 * params, "foreach_step": 2 * params}
    assert step_terms(shape, replace(run, foreach_step=False)) == {}


def test_fabric_fsdp1_holds_the_root_and_its_gradients_at_the_backwards_end() -> None:
    """Fabric's FSDP1 (use_orig_params): the root unit gathered throughout; the head's gradient held
    from the head's backward to the end, where the embedding's gradient and the joined root gradient
    join it; no_sync accumulation keeps the whole gradient unsharded."""
    shape = replace(LLAMA3_8B, program="litgpt", seq=512)
    run = Run(dp=4, strategy="fsdp-full", micro_batch=4, precision="bf16", pure16=True, recompute="full",
              fabric_fsdp1=True, no_sync_grads=True, loop_keeps_logits=True)
    parts = terms(shape, run)
    head = 128256 * 4096
    root = 2 * head + 4096
    assert parts["fsdp1_root_unit"] == 2 * root
    assert parts["fsdp1_head_grad"] == 2 * head
    assert parts["fsdp1_root_grads"] == 2 * head + 4096 * 2 + 2 * root
    params = 32 * shape.layer_params() + shape.embedding_params()
    assert parts["states"] + parts["no_sync_grads"] == 6 * params / 4 + 2 * params
    end = sum(parts[k] for k in ("states", "no_sync_grads", "fsdp1_root_unit", "loop_logits", "fsdp1_head_grad",
                                 "fsdp1_root_grads"))
    assert backward_peak(parts) >= end
    # the end of the backward holds no activation and no loss tensor, only the loop's fp32 logits
    assert parts["loop_logits"] == 4 * 128256 * 4 * 512
    without = terms(shape, replace(run, fabric_fsdp1=False))
    assert not {"fsdp1_root_unit", "fsdp1_head_grad", "fsdp1_root_grads"} & set(without)


def test_a_tied_head_counts_its_table_once() -> None:
    tied = replace(LLAMA3_8B, tied_head=True)
    assert LLAMA3_8B.embedding_params() - tied.embedding_params() == 128256 * 4096
