"""FLOP counts and bandwidth factors of the workloads, as perf-model.md defines them.

Pure Python, no torch: the registry and the orchestrator use these too. Every
count is floating-point operations with a multiply-add counted as 2, except
where the reference defines otherwise (ReLU: one operation per element).

Backward passes (the primitives' ``--backward true``): a layer's backward
computes the gradient of its input and of its weights, each a product the size
of the forward one, so backward = 2 x forward for GEMM-like layers (conv2d,
LSTM, transformer block); ReLU's backward is one select per element, the same
count as its forward.
"""

from __future__ import annotations

BACKWARD_FACTOR = 2  # backward FLOPs / forward FLOPs of a layer with weights


def gemm(m: int, n: int, k: int) -> int:
    """(M,K) x (K,N): 2*M*N*K."""
    return 2 * m * n * k


def conv_out(size: int, filt: int, pad: int, stride: int = 1) -> int:
    """Output extent: (size + 2*pad - filt) // stride + 1."""
    out = (size + 2 * pad - filt) // stride + 1
    if out < 1:
        raise ValueError(f"filter {filt} with padding {pad} does not fit input {size}")
    return out


def conv2d(w: int, h: int, c: int, b: int, k: int, fw: int, fh: int, pw: int = 0, ph: int = 0,
           sw: int = 1, sh: int = 1) -> int:
    """Forward conv2d: 2*Wo*Ho*k*c*fw*fh*b, Wo=(w+2pw-fw)/sw+1, Ho=(h+2ph-fh)/sh+1.

    w, h: input width, height; c: input channels; b: batch; k: filters (output channels).
    """
    return 2 * conv_out(w, fw, pw, sw) * conv_out(h, fh, ph, sh) * k * c * fw * fh * b


def relu(w: int, h: int, c: int, b: int) -> int:
    """ReLU: w*h*c*b (one operation per element)."""
    return w * h * c * b


def lstm(steps: int, batch: int, inputs: int, hidden: int, layers: int = 1) -> int:
    """LSTM as the accelerator study defines it, per layer 2*4*s*i*h*b + 2*4*s*h*b.

    The study's recurrent term 2*4*s*h*b has no second factor h (see
    :func:`lstm_full` for the count of the actual h x h recurrent product). Layers
    after the first take the hidden state (size h) as input.
    """
    total = 0
    for layer in range(layers):
        i = inputs if layer == 0 else hidden
        total += 2 * 4 * steps * i * hidden * batch + 2 * 4 * steps * hidden * batch
    return total


def lstm_full(steps: int, batch: int, inputs: int, hidden: int, layers: int = 1) -> int:
    """LSTM with both products counted in full: per layer 2*4*s*b*h*(i + h)."""
    total = 0
    for layer in range(layers):
        i = inputs if layer == 0 else hidden
        total += 2 * 4 * steps * batch * hidden * (i + hidden)
    return total


def transformer_layer_params(hidden: int, bias: bool = True) -> int:
    """Parameters of one GPT layer: 12h^2 (+13h for biases and the two LayerNorms)."""
    h = hidden
    return 12 * h * h + ((13 * h) if bias else 2 * h)


def transformer_block_forward(batch: int, seq: int, hidden: int, bias: bool = True) -> int:
    """One GPT layer's forward: b*s*(2*N_layer + 4*h*s).

    2*N_layer per token for the weight products, 4*h*s per token for the
    attention scores (Q K^T) and their use (scores x V), the full s x s square
    (causal masking not halved): one layer's share of 6N + 12*L*h*s divided by 3.
    """
    return batch * seq * (2 * transformer_layer_params(hidden, bias) + 4 * hidden * seq)


def transformer_block_backward(batch: int, seq: int, hidden: int, bias: bool = True) -> int:
    return BACKWARD_FACTOR * transformer_block_forward(batch, seq, hidden, bias)


def gpt_train_flops_per_token(n_params: int, n_layer: int, hidden: int, seq: int) -> int:
    """Model FLOPs per trained token: 6N + 12*L*h*s (attention not halved for causality)."""
    return 6 * n_params + 12 * n_layer * hidden * seq


def megatron_flops_per_iteration(batch: int, seq: int, n_layer: int, hidden: int, vocab: int) -> float:
    """Megatron's form: 72*B*s*L*h^2 * (1 + s/(6h) + V/(12*L*h)) (no recompute)."""
    return 72 * batch * seq * n_layer * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * n_layer * hidden))


def allreduce_bus_factor(ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth factor 2(n-1)/n (0 on one rank)."""
    return 2 * (ranks - 1) / ranks


def allreduce_bandwidths(nbytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: algbw = size/time, busbw = algbw * 2(n-1)/n."""
    algbw = nbytes / seconds
    return algbw, algbw * allreduce_bus_factor(ranks)
