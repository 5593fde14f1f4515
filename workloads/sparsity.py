"""Weight sparsity by magnitude pruning (study A.5: sparsity 0, 0.6, 0.8, 0.9), for gpt2.

Which weights: the linear layers inside the transformer blocks (attention q/k/v and
output projection, MLP up and down), where nearly all of a GPT's compute is. The token
embedding (tied to the output head), position embedding, biases and LayerNorms stay
dense. How: before the first step, each such weight keeps its largest (1 - sparsity)
fraction of entries by magnitude (per tensor, unstructured); a boolean mask per weight
zeroes the rest, and is applied again after every optimiser step (an optimizer step
post-hook), so the pruned entries stay zero while the others train.

What it measures: these are ordinary dense tensors with zeros in them, run by the same
dense matrix-product kernels. On GPUs (A100, H100, MI250, Max 1550) a dense kernel does
the same work whatever the values, so throughput at 0.9 equals throughput at 0 (minus the
mask multiply after each step): exactly the study's finding for platforms without
unstructured-sparsity support. Hardware that skips zeros (Cerebras's weight sparsity) is
where a speed-up would show; its vendor stack, not this program, is what runs there.
NVIDIA's 2:4 structured sparsity needs its own kernels (cuSPARSELt) and is not used.
Model FLOPs (tflops, mfu) stay the dense counts. Figures (``db/glossary_metrics.yaml``):
``weight_sparsity`` = pruned_params / prunable_params (study A.5's sparsity),
``pruned_params`` the entries the masks zero, ``prunable_params`` the entries of the
blocks' linear weights, ``measured_sparsity`` the fraction of exact zeros in them after
the timed steps (the masks held).

DDP only (every rank holds the whole weight and computes the same mask): sharded
strategies (fsdp, zero) would need the mask computed over shards and are refused.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from workloads.harness import Refused


def prunable_weights(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The weights of the ``nn.Linear`` layers inside the model's transformer blocks."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise Refused(f"{type(model).__name__} has no transformer blocks to prune")
    return [(f"blocks.{name}", module.weight) for name, module in blocks.named_modules()
            if isinstance(module, nn.Linear)]


def magnitude_mask(weight: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Boolean mask keeping the largest ``(1 - sparsity)`` fraction of ``|weight|`` (exactly
    ``round(sparsity * numel)`` entries are dropped; ties broken by position)."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    drop = int(round(sparsity * weight.numel()))
    mask = torch.ones(weight.numel(), dtype=torch.bool, device=weight.device)
    if drop:
        mask[torch.topk(weight.detach().abs().flatten().float(), drop, largest=False).indices] = False
    return mask.view_as(weight)


@torch.no_grad()
def apply_masks(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    for weight, mask in pairs:
        weight.mul_(mask)


def attach(trainer: Any, sparsity: float, strategy: str) -> Callable[[], dict[str, float]]:
    """Prune ``trainer.model`` now and after every step of ``trainer.opt``.

    Returns what gives the metrics at the end: the masked fraction, the pruned and prunable
    weight counts, and the fraction of zeros actually found in those weights then."""
    if not 0.0 <= sparsity < 1.0:
        raise Refused(f"--sparsity must be in [0, 1), got {sparsity}")
    if strategy != "ddp":
        raise Refused(f"--sparsity is implemented for ddp only (every rank holds whole weights); "
                      f"not for {strategy}")
    opt = getattr(trainer, "opt", None)
    if opt is None:
        raise Refused(f"--sparsity needs a PyTorch optimiser on the trainer ({type(trainer).__name__} has none)")
    model = getattr(trainer.model, "module", trainer.model)  # DDP wraps the model
    pairs = [(w, magnitude_mask(w, sparsity)) for _, w in prunable_weights(model)]
    apply_masks(pairs)
    opt.register_step_post_hook(lambda *_: apply_masks(pairs))
    total = sum(w.numel() for w, _ in pairs)
    pruned = sum(int((~m).sum()) for _, m in pairs)

    def metrics() -> dict[str, float]:
        return {"weight_sparsity": pruned / total if total else 0.0, "pruned_params": float(pruned),
                "prunable_params": float(total), "measured_sparsity": measured_sparsity(model)}

    return metrics


def measured_sparsity(model: nn.Module) -> float:
    """Fraction of exact zeros in the prunable weights now (checks that masks held)."""
    weights = [w for _, w in prunable_weights(getattr(model, "module", model))]
    total = sum(w.numel() for w in weights)
    return sum(int((w == 0).sum()) for w in weights) / total if total else 0.0
