"""Each workload's memory formula: the device bytes one rank needs, from a run's values.

This is the hook the memory predictor owns (``workloads/registry.py`` says nothing about
memory, so the benchmark programs never import the predictor). gpt2 is traced from its own
program where it can be (``orchestrator/predict/memory.py``); its formula is the fallback. A
workload with no entry has no memory prediction (``orch plan`` shows none and skips nothing).
"""

from __future__ import annotations

from typing import Any, Callable

from orchestrator.predict import memory
from workloads.models import llama_configs as llama
from workloads.models import sizes
from workloads.registry import BYTES_PER_ELEMENT

Formula = Callable[[dict[str, Any]], int]


def gemm(p: dict[str, Any]) -> int:
    """A, B and C; fp8's C is bf16 (workloads/gemm.py: ``_scaled_mm``'s ``out_dtype``)."""
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    precision = str(p.get("precision", "fp32"))
    size = BYTES_PER_ELEMENT.get(precision, 4)
    return (m * k + k * n) * size + m * n * (2 if precision == "fp8" else size)


def bert(p: dict[str, Any]) -> int:
    """Training: 16 bytes per parameter (fp32 weights, gradients, AdamW) + activations + MLM logits."""
    cfg = sizes.BERT_SIZES[str(p.get("size") or "large")]
    batch, seq = int(p.get("batch_size") or 32), int(p.get("seq_len") or 128)
    precision = str(p.get("precision") or "fp32")
    predictions = min(int(p.get("max_predictions") or 20), seq)
    logits = batch * predictions * cfg.vocab_size * (BYTES_PER_ELEMENT.get(precision, 4) + 8)
    return int(16 * sizes.bert_params(cfg)
               + memory.activation_bytes(cfg.n_layer, batch, seq, cfg.n_embd, 0, precision) + logits)


def distilbert(p: dict[str, Any]) -> int:
    """Inference: the weights in the precision's dtype + two layers' activations (nothing is kept)."""
    cfg = sizes.DISTILBERT_SIZES[str(p.get("size") or "full")]
    batch, seq = int(p.get("batch_size") or 1), int(p.get("seq_len") or 128)
    width = BYTES_PER_ELEMENT.get(str(p.get("precision") or "fp32"), 4)
    return int(sizes.bert_params(cfg, pretraining_heads=False) * width + 2 * batch * seq * cfg.n_embd * 8 * width)


def llm_inference(p: dict[str, Any]) -> int:
    """Per rank: its shard of the weights and of the KV cache (tensor parallel over the ranks)."""
    cfg = llama.SIZES[str(p.get("model") or "tiny")]
    element = BYTES_PER_ELEMENT.get(str(p.get("precision") or "fp32"), 4)
    tp = max(1, int(p.get("devices") or 1))
    tokens = int(p.get("concurrency") or 1) * (int(p.get("input_len") or 128) + int(p.get("output_len") or 128))
    return (llama.num_params(cfg) * element + tokens * llama.kv_bytes_per_token(cfg, element)) // tp


FORMULAS: dict[str, Formula] = {
    "gemm": gemm,
    "conv2d": memory.conv2d,
    "relu": memory.relu,
    "transformer_block": memory.transformer_block,
    "gpt2": lambda p: memory.gpt_training(p, default_model="gpt2"),
    "genslm": lambda p: memory.gpt_training(p, default_model="gpt2-xl", vocab=70, default_batch=1),
    "allreduce": memory.allreduce,
    "bert": bert,
    "distilbert": distilbert,
    "llm_inference": llm_inference,
}


def formula_for(workload: str) -> Formula | None:
    """The workload's memory formula, or None where it has none."""
    return FORMULAS.get(workload)
