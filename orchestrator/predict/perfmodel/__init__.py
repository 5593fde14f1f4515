"""A time and memory model of transformer training on a model of the machine (issue 11, item 2).

What it answers: for a GPT-style model, a parallel layout (data, tensor, pipeline, context
parallel degrees, ZeRO/FSDP stage, activation recompute) and a site, the step time, tokens/s,
MFU and per-device memory, without running anything. ``orch predict`` ranks layouts with it;
``orch plan`` shows each run's predicted step and run time; ``orch calibrate`` fits its
efficiency factors to measured runs.

The machine (:mod:`.machine`): a device with a peak FLOP/s per precision and a memory
bandwidth (site profile ``device``), inside a two-tier network: ``fast_domain`` devices
(NVLink, xGMI, a node's shared memory) at ``fast_gbs`` each, and between domains the node's NICs
(``nics`` x ``nic_gbs``, else ``inter_node_gbs`` x devices per node; site profile ``network``;
estimated from the device type where absent).

The model (:mod:`.transformer`), after Calculon (SC23) and Subramanian et al. (SC24 PMBS):

- every op of a layer (LayerNorm, QKV, attention, projection, MLP, GeLU, residuals) is a
  roofline: max(FLOPs / (peak x matmul efficiency), bytes / (bandwidth x memory efficiency)),
  plus a fixed launch cost per op; backward is 2x the forward's FLOPs and bytes; full
  activation recompute runs the forward once more (hardware FLOPs, not model FLOPs);
- collectives are rings in the alpha-beta model: all-reduce 2(n-1)/n x bytes / bandwidth +
  2(n-1) x latency; all-gather and reduce-scatter half that; a group's bandwidth is its slowest
  link: ``fast_gbs`` when the group lies inside one fast domain, else hierarchical as NCCL runs
  it: a group with k of a node's devices gets k/per_node of the node's whole NIC bandwidth
  (capped by ``fast_gbs``; issue 25: one device's share made cross-node all-reduce 4-8x slow). Ranks
  are placed as Megatron (and workloads/layouts.py) place them: tensor-parallel innermost,
  then context, data, pipeline outermost;
- overlap rules: tensor-parallel collectives (1D Megatron with sequence parallel, or 2D) are on
  the critical path, never overlapped; context parallel is modelled as the gpt2 workload runs it
  (workloads/context.py): K and V all-gathered in each forward and their gradients all-reduced
  in the backward, not overlapped (a ring-attention implementation would hide most of it);
  pipeline point-to-point sends are not overlapped; the data-parallel
  gradient all-reduce overlaps the last micro-batch's backward except its last 25 MB bucket;
  FSDP grad-op splits it into a reduce-scatter (overlapped the same way) and an
  all-gather of the updated parameters after the optimizer step (exposed); FSDP-full
  parameter all-gathers (1.5x the volume in all) overlap each micro-batch's compute
  (prefetch) but for one layer's, and its reduce-scatter overlaps the last backward;
  DeepSpeed's ZeRO stages (zero1/2/3) as DeepSpeed runs them by default: ZeRO-1/2 without
  overlap_comm (reduce after the backward, ZeRO-2 each micro-batch), ZeRO-3 fetching each
  submodule's parameters (forward, backward, recomputed forward) with only its 5e7-element
  prefetch bucket ahead of use;
- pipeline parallel is 1F1B: a step is (m + p - 1) micro-batch times of the slowest stage (the
  last, with the LM head), i.e. a bubble of (p - 1)/(m + p - 1), divided by ``vp`` with
  Megatron's interleaved schedule; the optimizer step is a memory pass over the local shard of
  parameters, gradients and Adam states; a fixed cost per step (``step_overhead_ms``) is added.

Global batch: ``batch_size`` sequences per device in the data-parallel layout, so the same
global batch (batch_size x devices) for every layout; a model replica processes its share in
micro-batches of ``micro_batch`` sequences (gradient accumulation, or the pipeline's m).

Memory per device (perf-model.md): model states per ZeRO stage (16N, 4N + 12N/d, 2N + 14N/d,
16N/d; fp32 16N too) of the local shard N/(t x p), DDP's gradient buckets (one more fp32
gradient copy), Korthikanti's activations (34 s b h per layer with fused attention, /t with
sequence parallel, 5 a s^2 b more unfused, 2 s b h with recompute, doubled in fp32), the 1F1B
stage holding min(m, p) micro-batches, the logits, and the device's fixed cost from the site.

Efficiency factors have documented defaults per device type (:data:`.machine.DEFAULT_EFFICIENCY`),
the matmul fraction per device model and precision (:data:`.machine.MATMUL_EFFICIENCY`), and are
replaced by fitted ones (``orch calibrate``, :mod:`.calibration`). Validated against published
measurements by ``benchmarks/validate_published.py`` (benchmarks/RESULTS.md).
"""

from orchestrator.predict.perfmodel.layout import Layout, enumerate_layouts
from orchestrator.predict.perfmodel.machine import Efficiency, Machine, machine_from_site
from orchestrator.predict.perfmodel.transformer import Estimate, ModelShape, estimate

__all__ = ["Efficiency", "Estimate", "Layout", "Machine", "ModelShape", "enumerate_layouts", "estimate",
           "machine_from_site"]
