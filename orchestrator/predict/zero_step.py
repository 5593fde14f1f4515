"""What DeepSpeed's ZeRO optimizer step holds beyond the sharded states (issue 25).

No torch. A ZeRO run's peak is the larger of two phases: the backward (activations, gathered
weights, buckets) and the optimizer step, when the activations are gone but DeepSpeed makes the
fp32 gradients the step reads. Beside the sharded states (``states.model_state_bytes``) a rank
holds, for the parameters one step call updates (``S`` elements: ZeRO-3's sub-group, at most
``sub_group_size`` of the rank's partition; ZeRO-1/2's partition of a parameter group):

- the conversion: ``flatten(averaged_gradients).to(fp32)``, a flat 16-bit copy of the gradient
  partitions (``w*S`` bytes, a new tensor: the partitions are many) and its fp32 conversion
  (``4*S``), both live while ``.to`` runs; the flat copy is freed right after. DeepSpeed 0.19.8
  (installed here) deepspeed/runtime/zero/stage3.py ``_prepare_fp32_grad_for_sub_group`` and
  stage_1_and_2.py ``step`` (``flat_grad_partition.to(...)``, then ``del flat_grad_partition``);
- the step: the fp32 gradient (``4*S``, freed after the step) and the optimizer's temporaries:
  torch.optim.AdamW's multi-tensor ("foreach") implementation, torch's default on CUDA, allocates
  one tensor the size of the parameters it steps (``exp_avg_sq_sqrt = torch._foreach_sqrt(
  exp_avg_sqs)``, torch/optim/adam.py ``_multi_tensor_adam``), here fp32; DeepSpeed's FusedAdam
  and a fused torch AdamW update in place (none).

In fp32 training the flat copy is already fp32 and ``.to`` returns it: ``4*S`` for the conversion.
Upper bound for ZeRO-1/2: DeepSpeed frees the 16-bit gradient partition once its fp32 copy exists
(``free_grad_in_param_list``), which the states still count.
"""

from __future__ import annotations

# DeepSpeed's default sub_group_size (docs "ZeRO Optimizations for FP16 Training"; config.py of
# DeepSpeed 0.19.8: pp_int(1e9)): elements of the partition one ZeRO-3 step call converts.
DS_SUB_GROUP_SIZE = 1_000_000_000


def step_elements(partition: float, stage: int, sub_group_size: float = DS_SUB_GROUP_SIZE) -> float:
    """Elements one step call converts to fp32: ZeRO-3 splits the rank's partition into sub-groups."""
    return min(partition, sub_group_size) if stage == 3 else partition


def step_bytes(elements: float, width: int, foreach_optimizer: bool) -> float:
    """Bytes beyond the sharded states while DeepSpeed steps ``elements`` parameters of ``width``-byte
    gradients: the larger of the conversion (flat copy + fp32) and the step (fp32 gradient + the
    optimizer's temporary)."""
    conversion = (width + 4) * elements if width != 4 else 4 * elements
    step = 4 * elements + (4 * elements if foreach_optimizer else 0)
    return max(conversion, step)
