"""Tensor and pipeline parallel training of the GPT (``workloads/layouts.py`` says which layout).

Mesh: ``init_device_mesh`` over (pp, dp, tp), tp innermost. Every rank first builds the
whole model from the run's seed (so a tp/pp run starts from exactly the weights of the
tp=1, pp=1 run: the same losses, the test's check), then keeps its share. The model must
therefore fit one device unsharded while it is built (gpt2-xl: 6.2 GB in fp32).

Tensor parallel (Megatron-style, ``torch.distributed.tensor.parallel``): in each block the
attention's fused q/k/v and the MLP's first linear are column-parallel, their output
projections row-parallel (one all-reduce each, forward and backward). The fused q/k/v rows
are regrouped per rank (q_r, k_r, v_r) before sharding, so each rank holds whole heads. The
token embedding is vocabulary-parallel (row-wise) and the output head column-parallel on
the same vocabulary shard (still tied), and the loss is computed on vocabulary-sharded
logits (``loss_parallel``): no rank holds the full batch x seq x vocab logits. LayerNorms,
the position embedding and the row-parallel biases are replicated.

Sequence parallel (``sequence_parallel``): between the tensor-parallel regions the residual
stream is split along the sequence (Shard(1)); LayerNorms and dropout run on 1/tp of the
tokens; the row-parallel outputs are reduce-scattered and the column-parallel inputs
all-gathered instead of all-reduced; the position embedding is sequence-sharded too.

Data parallel over the dp ranks of a tp/pp layout: ``ddp`` all-reduces the gradients over
the dp group once per step after the backward (one collective per parameter, not
overlapped with the backward as DDP's buckets are); ``fsdp-full``/``fsdp-grad-op``
apply FSDP2 ``fully_shard`` over the dp dimension of the mesh (tp only).

Pipeline parallel (``torch.distributed.pipelining``): the blocks are split into pp stages
(``layouts.stage_bounds``), the first also holding the embeddings, the last the final
LayerNorm, head and loss. The step's m micro-batches go through ``Schedule1F1B`` or
``ScheduleGPipe`` (gradients scaled by 1/m, as accumulation does). With tied weights the
first stage's embedding and the last stage's head start equal and their gradients are
summed between the two stages after each step (Megatron's embedding group). fp16 is
refused with pp > 1 (the schedule runs the backward itself, without a loss scale).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn import functional as F

from workloads.harness import Session
from workloads.layouts import Layout, stage_bounds
from workloads.models.configs import GPTConfig
from workloads.models.gpt import GPT
from workloads.strategies import TorchTrainer, adamw, grads_to_none

Batch = tuple[torch.Tensor, torch.Tensor]


def make_mesh(session: Session, layout: Layout) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    session.ensure_process_group()
    return init_device_mesh(session.device.type, (layout.pp, layout.dp, layout.tp),
                            mesh_dim_names=("pp", "dp", "tp"))


# ------------------------------------------------------------------ tensor parallel

def _regroup_qkv(linear: nn.Linear, tp: int) -> None:
    """Rows [q; k; v] -> [q_0; k_0; v_0; q_1; ...]: rank r's column shard is its own heads' q, k, v."""
    with torch.no_grad():
        for param in (linear.weight, linear.bias):
            if param is None:
                continue
            q, k, v = param.chunk(3, dim=0)
            parts = [t.chunk(tp, dim=0) for t in (q, k, v)]
            param.copy_(torch.cat([part[r] for r in range(tp) for part in parts], dim=0))


def apply_tensor_parallel(root: nn.Module, mesh: Any, sequence_parallel: bool) -> None:
    """Shard ``root`` (a GPT or a pipeline stage: ``blocks``, optionally ``wte``, ``wpe``, ``ln_f``,
    ``lm_head``) over the 1-D tensor-parallel ``mesh``."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    tp = mesh.size()
    sp = sequence_parallel
    between = Shard(1) if sp else Replicate()  # the residual stream's layout between blocks
    for block in root.blocks:  # type: ignore[union-attr]  # nn.Module's attributes are typed Tensor | Module
        _regroup_qkv(block.attn.c_attn, tp)
        plan: dict[str, Any] = {
            "attn.c_attn": ColwiseParallel(),
            "attn.c_proj": RowwiseParallel(output_layouts=between),
            "mlp.c_fc": ColwiseParallel(),
            "mlp.c_proj": RowwiseParallel(output_layouts=between),
        }
        if sp:
            plan.update({
                "ln_1": SequenceParallel(),
                "ln_2": SequenceParallel(),
                "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, mesh, plan)
    wte, head = getattr(root, "wte", None), getattr(root, "lm_head", None)
    tied = wte is not None and head is not None and head.weight is wte.weight
    top: dict[str, Any] = {}
    if wte is not None:
        top["wte"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=between)
        if sp:
            top["wpe"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0))  # (s, h) positions
    if head is not None:
        if sp:
            top["ln_f"] = SequenceParallel()
        # Vocabulary-sharded logits, kept as DTensors for loss_parallel's cross-entropy.
        top["lm_head"] = ColwiseParallel(input_layouts=between, output_layouts=Shard(-1), use_local_output=False)
    if top:
        parallelize_module(root, mesh, top)
    if tied:
        root.lm_head.weight = root.wte.weight  # type: ignore[union-attr]  # both Shard(0) over the vocabulary: one parameter again


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _local_grad(param: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter's gradient, laid out as the parameter is (an embedding's
    gradient may come back replicated or partial where the weight is sharded)."""
    from torch.distributed.tensor import DTensor

    grad = param.grad
    assert grad is not None
    if isinstance(grad, DTensor) and isinstance(param, DTensor) and grad.placements != param.placements:
        grad = grad.redistribute(param.device_mesh, param.placements)
        param.grad = grad
    return _local(grad)


def _loss_context(layout: Layout) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    if layout.tp == 1:
        return contextlib.nullcontext
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel


def _dp_sync(params: list[nn.Parameter], group: Any, dp: int) -> Callable[[], None]:
    """ddp over the dp ranks of a model-parallel layout: average the gradients after the backward."""
    if dp == 1:
        return lambda: None

    def sync() -> None:
        grads = [_local_grad(p) for p in params if p.grad is not None]
        for work in [dist.all_reduce(g, group=group, async_op=True) for g in grads]:
            work.wait()
        for g in grads:
            g.div_(dp)

    return sync


class TensorParallelTrainer(TorchTrainer):
    """tp > 1, pp = 1: the step of ddp/fsdp, each forward and backward under loss_parallel, then the
    dp gradient average (``sync``) before the optimiser."""

    def __init__(self, session: Session, model: nn.Module, layout: Layout, sync: Callable[[], None],
                 micro_sync: Callable[[bool], contextlib.AbstractContextManager[Any]], lr: float) -> None:
        super().__init__(session, model, model, micro_sync, lr, loss_context=_loss_context(layout),
                         after_backward=sync, optimizer=adamw(session, model.parameters(), lr, mixed_tensors=True))

    def local_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return _local(loss)


def build_tensor_parallel(session: Session, strategy: str, cfg: GPTConfig, layout: Layout, lr: float) -> Any:
    mesh = make_mesh(session, layout)
    with session.device.torch_device:
        model = GPT(cfg)  # the whole model from the seed, as the tp=1 run builds it
    apply_tensor_parallel(model, mesh["tp"], layout.sequence_parallel)
    dp_mesh = mesh["dp"]
    if strategy.startswith("fsdp"):
        from torch.distributed.fsdp import fully_shard

        full = strategy == "fsdp-full"
        for block in model.blocks:
            fully_shard(block, mesh=dp_mesh, reshard_after_forward=full)
        fully_shard(model, mesh=dp_mesh, reshard_after_forward=full)

        @contextlib.contextmanager
        def micro_sync(last: bool) -> Iterator[None]:
            model.set_requires_gradient_sync(last)  # type: ignore[operator]  # FSDP2 adds it to the module
            yield

        return TensorParallelTrainer(session, model, layout, lambda: None, micro_sync, lr)
    sync = _dp_sync(list(model.parameters()), dp_mesh.get_group(), layout.dp)
    return TensorParallelTrainer(session, model, layout, sync, lambda last: contextlib.nullcontext(), lr)


# ------------------------------------------------------------------ pipeline parallel

class Stage(nn.Module):
    """Blocks [lo, hi) of a GPT; the first stage adds the embeddings, the last the final
    LayerNorm and the head (its output: the logits)."""

    def __init__(self, model: GPT, lo: int, hi: int, first: bool, last: bool) -> None:
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.wte, self.wpe, self.drop = model.wte, model.wpe, model.drop
        self.blocks = nn.ModuleList(model.blocks[lo:hi])
        if last:
            self.ln_f, self.lm_head = model.ln_f, model.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            pos = torch.arange(x.size(1), device=x.device)
            x = self.drop(self.wte(x) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x)) if self.last else x


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # fp32 loss, as GPT.forward computes it.
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))


class PipelineTrainer:
    """pp > 1: one schedule step over the step's micro-batches, then the tied-embedding and dp
    gradient sums, then the optimiser."""

    def __init__(self, session: Session, stage_module: Stage, schedule: Any, layout: Layout,
                 syncs: list[Callable[[], None]], loss_rank: int, lr: float) -> None:
        self.session, self.model, self.schedule, self.layout = session, stage_module, schedule, layout
        self.syncs, self.loss_rank = syncs, loss_rank
        self.loss_context = _loss_context(layout)
        self.opt = adamw(session, stage_module.parameters(), lr, mixed_tensors=layout.tp > 1)
        self.to_none = grads_to_none(session)

    def step(self, micro: list[Batch]) -> torch.Tensor:
        prec, dev = self.session.precision, self.session.device
        x = torch.cat([m[0] for m in micro])
        y = torch.cat([m[1] for m in micro])
        losses: list[torch.Tensor] = []
        with self.loss_context(), prec.autocast(dev):
            if self.model.first:
                self.schedule.step(x)
            elif self.model.last:
                self.schedule.step(target=y, losses=losses)
            else:
                self.schedule.step()
        for sync in self.syncs:
            sync()
        self.opt.step()
        self.opt.zero_grad(set_to_none=self.to_none)
        if not losses:
            return torch.zeros((), device=x.device)
        return _local(losses[-1].detach()).float()  # the last micro-batch's, as with grad_accum

    def final_loss(self, loss: torch.Tensor) -> float:
        """The last stage's loss (its last micro-batch's), on every rank."""
        value = loss.detach().float().reshape(1).clone()
        dist.broadcast(value, src=self.loss_rank)
        return float(value.item())


def build_pipeline(session: Session, strategy: str, cfg: GPTConfig, layout: Layout, lr: float) -> PipelineTrainer:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    mesh = make_mesh(session, layout)
    pp_index, dp_index, tp_index = layout.coords(session.rank)
    lo, hi = stage_bounds(cfg.n_layer, layout.pp)[pp_index]
    first, last = pp_index == 0, pp_index == layout.pp - 1
    with session.device.torch_device:
        model = GPT(cfg)  # the whole model from the seed; this rank keeps its stage
    stage_module = Stage(model, lo, hi, first, last)
    del model
    if layout.tp > 1:
        apply_tensor_parallel(stage_module, mesh["tp"], layout.sequence_parallel)
    syncs: list[Callable[[], None]] = []
    # Tied embedding and head on two stages: their gradients summed between the first and last
    # stage of each (dp, tp) position. new_group is collective: every rank makes every group.
    tie_group = None
    if cfg.tie_weights:
        for d in range(layout.dp):
            for t in range(layout.tp):
                ranks = [d * layout.tp + t, ((layout.pp - 1) * layout.dp + d) * layout.tp + t]
                group = dist.new_group(ranks)
                if (d, t) == (dp_index, tp_index):
                    tie_group = group
    if tie_group is not None and (first or last):
        tied = stage_module.wte.weight if first else stage_module.lm_head.weight
        syncs.append(lambda: dist.all_reduce(_local_grad(tied), group=tie_group))
    syncs.append(_dp_sync(list(stage_module.parameters()), mesh["dp"].get_group(), layout.dp))
    stage = PipelineStage(stage_module, pp_index, layout.pp, session.device.torch_device,
                          group=mesh["pp"].get_group())
    kind = Schedule1F1B if layout.schedule == "1f1b" else ScheduleGPipe
    schedule = kind(stage, n_microbatches=layout.microbatches, loss_fn=_cross_entropy)
    loss_rank = (layout.pp - 1) * layout.dp * layout.tp  # last stage, first dp and tp position
    return PipelineTrainer(session, stage_module, schedule, layout, syncs, loss_rank, lr)
