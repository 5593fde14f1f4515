"""orch's GPT runs the same precisions on a CPU as on a GPU, so the CPU trace predicts the GPU run (issue 25).

``orch plan`` traces the workload's step on the CPU, under the CPU's autocast; the run it predicts
is a CUDA one, under CUDA's. The two autocasts keep different lists of the ops they run in fp32:
CUDA's (the PyTorch docs' Autocast Op Reference, "CUDA Ops that can autocast to float32") has
softmax, log_softmax, layer_norm, exp, pow, rsqrt, sum and the losses, among others, where the CPU's
runs softmax and layer_norm in a 16-bit input's own dtype. An op of that list given a 16-bit tensor
would run in fp32 on a GPU and in 16 bits in the trace, and save different bytes. So the model must
never hand one a 16-bit tensor: this runs the model's forward and backward under the CPU's bf16
autocast, for every attention and with dropout and checkpointing, and records each call of a CUDA
fp32-list function that receives a 16-bit tensor. There must be none.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from workloads.models.configs import ATTENTIONS
from workloads.models.gpt import GPT, GPTConfig

# CUDA's autocast-to-float32 ops that a transformer's code calls by these names (PyTorch docs,
# torch.amp, "CUDA Ops that can autocast to float32"; the fp32_set_opt_dtype ones included).
CUDA_FP32_OPS = {
    "softmax", "log_softmax", "softmin", "layer_norm", "group_norm", "exp", "expm1", "log", "log1p", "log2",
    "log10", "pow", "__pow__", "__rpow__", "rsqrt", "reciprocal", "sum", "prod", "cumsum", "cumprod", "norm",
    "normalize", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "kl_div", "softplus", "logsumexp",
    "cosine_similarity", "binary_cross_entropy_with_logits", "__rdiv__", "__rtruediv__",
}
HALF = (torch.bfloat16, torch.float16)


class _Recorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in CUDA_FP32_OPS and torch.is_autocast_enabled("cpu"):
            tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            if any(t.dtype in HALF for t in tensors):
                self.calls.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("checkpointing", [False, True])
def test_no_cuda_fp32_op_sees_a_16_bit_tensor(attention: str, checkpointing: bool) -> None:
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=32, vocab_size=64, block_size=16, dropout=0.1,
                    attention=attention, checkpointing=checkpointing)
    model = GPT(cfg)
    idx = torch.randint(0, 64, (2, 16))
    recorder = _Recorder()
    with recorder, torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(idx, idx)
    assert loss is not None
    with recorder:
        loss.backward()
    assert recorder.calls == [], f"{attention}: CUDA's autocast would run these in fp32: {sorted(set(recorder.calls))}"
