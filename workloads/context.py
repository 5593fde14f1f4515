"""Context parallel training of the GPT: each of cp ranks holds 1/cp of every sequence.

The ranks of a context-parallel group read the same batch (``layouts.Layout.dp_rank``) and each
keeps its contiguous slice of the sequence: tokens [c x s/cp, (c+1) x s/cp) on group rank c,
with their positions. Everything but attention is per token, so it runs on the slice alone;
attention needs every earlier token's keys and values, so each block all-gathers K and V
over the group (Llama 3's all-gather context parallelism, not a ring) and attends its s/cp
queries to all s keys under the causal mask shifted by its offset. The gather's backward sums
every rank's gradient for the gathered keys and values and keeps this rank's slice (an
all-reduce: gloo has no reduce-scatter).

Gradients: ddp or FSDP2 over all ranks averages the dp x cp ranks' gradients, which is the
gradient of the mean loss over the replicas' tokens (equal slices, so the mean of the slices'
means). The loss a rank reports is its group's mean. So a cp run starts from the plain run's
weights and gives its losses (tests/workloads/test_gpt2_layouts.py).

What this does not do: load balancing of the causal work (the last slice attends to every
key, the first to its own), overlap of the K/V exchange with compute (the time model prices it
as exposed, as done here: orchestrator/predict/perfmodel/transformer.py), or context parallel together
with tp/pp.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from workloads import strategies
from workloads.harness import Session
from workloads.layouts import Layout
from workloads.models.configs import GPTConfig


class _GatherSequence(torch.autograd.Function):
    """All-gather along ``dim`` over the group; backward: the summed gradient's own slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shards: "SequenceShards", dim: int) -> torch.Tensor:
        ctx.shards, ctx.dim = shards, dim
        parts = [torch.empty_like(x) for _ in range(shards.size)]
        dist.all_gather(parts, x.contiguous(), group=shards.group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        shards = ctx.shards
        grad = grad.clone(memory_format=torch.contiguous_format)  # reduced in place: not autograd's buffer
        dist.all_reduce(grad, group=shards.group)
        return grad.chunk(shards.size, dim=ctx.dim)[shards.index].contiguous(), None, None


class SequenceShards:
    """This rank's slice of every sequence: slice ``index`` of ``size``, the others on ``group``."""

    def __init__(self, group: Any, size: int, index: int) -> None:
        self.group, self.size, self.index = group, size, index

    def take(self, tokens: torch.Tensor) -> torch.Tensor:
        """This rank's slice of (batch, seq) tokens."""
        part = tokens.size(1) // self.size
        return tokens[:, self.index * part:(self.index + 1) * part]

    def offset(self, local: int) -> int:
        """Position of this rank's first token in the sequence."""
        return self.index * local

    def gather(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's slices of ``t`` along the sequence dimension ``dim``, in order."""
        return _GatherSequence.apply(t, self, dim)

    def causal_mask(self, local: int, device: torch.device) -> torch.Tensor:
        """(local queries, all keys) booleans, True where a query may attend: key position <= its own."""
        queries = torch.arange(local, device=device) + self.offset(local)
        keys = torch.arange(local * self.size, device=device)
        return keys[None, :] <= queries[:, None]


def _groups(session: Session, layout: Layout) -> SequenceShards:
    """The context-parallel group of this rank (new_group is collective: every rank makes every group)."""
    session.ensure_process_group()
    mine = None
    for first in range(0, session.world_size, layout.cp):
        ranks = list(range(first, first + layout.cp))
        group = dist.new_group(ranks)
        if session.rank in ranks:
            mine = group
    return SequenceShards(mine, layout.cp, layout.cp_rank(session.rank))


def attach(model: Any, shards: SequenceShards) -> None:
    """Make ``model`` (a GPT) compute on its slice of every sequence."""
    model.context = shards
    for block in model.blocks:
        block.attn.context = shards


class ContextParallelTrainer:
    """The ddp/fsdp trainer over all ranks, on each rank's slice; the loss reported is the group's mean."""

    def __init__(self, inner: Any, shards: SequenceShards) -> None:
        self.inner, self.shards, self.model = inner, shards, inner.model

    def __getattr__(self, name: str) -> Any:  # opt and the rest: the inner trainer's
        return getattr(self.inner, name)

    def step(self, micro: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        return self.inner.step(micro)

    def final_loss(self, loss: torch.Tensor) -> float:
        value = loss.detach().float().reshape(1).clone()
        dist.all_reduce(value, group=self.shards.group)
        return float(value.item()) / self.shards.size


def build(session: Session, strategy: str, cfg: GPTConfig, layout: Layout, lr: float, batch: int,
          accum: int) -> ContextParallelTrainer:
    shards = _groups(session, layout)
    inner = strategies.build(session, strategy, cfg, lr=lr, batch=batch, accum=accum)
    attach(getattr(inner.model, "module", inner.model), shards)  # DDP wraps the GPT; FSDP2 is the GPT
    return ContextParallelTrainer(inner, shards)
