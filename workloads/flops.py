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


def conv2d_study_c(w: int, h: int, c: int, b: int, k: int, fw: int, fh: int, pw: int = 0, ph: int = 0,
                   sw: int = 1, sh: int = 1) -> float:
    """Forward conv2d as study C (DeepBench on the ALCF AI Testbed) counts it:
    2*Wo*Ho*k*c*fw*fh*b with Wo=(w+2pw-fw)/sw and Ho=(h+2ph-fh)/sh, no +1 (perf-model.md).

    Less than :func:`conv2d`'s true count (by (Wo+1)(Ho+1)/(Wo*Ho) at stride 1: 25/16 on
    DeepBench's 7x7 3x3 shape); kept so the study's TFLOP/s can be set beside its table.
    Real division, as the formula is written (every DeepBench shape has stride 1).
    """
    wo = max(0.0, (w + 2 * pw - fw) / sw)
    ho = max(0.0, (h + 2 * ph - fh) / sh)
    return 2 * wo * ho * k * c * fw * fh * b


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


# --- Study C models: U-Net, ResNet-50, BERT, DistilBERT, BraggNN, CANDLE Uno ------------------
# Counted: 2 FLOPs per multiply-add of every convolution, transposed convolution, linear
# layer and attention product (Q K^T and scores x V over the full square). Not counted:
# biases, normalisation, activations, pooling, softmax, embedding look-ups and the loss
# (a few per cent of these models' work). The transformer models (BERT, DistilBERT) count
# their layers as the GPT formulas above do: 2 FLOPs per layer parameter per token, biases
# and LayerNorms included, so the same layer has the same count everywhere.
# Training = forward + backward = 3 x forward (backward = 2 x forward, see BACKWARD_FACTOR).

TRAIN_FACTOR = 1 + BACKWARD_FACTOR


def linear(rows: int, fan_in: int, fan_out: int) -> int:
    """``rows`` vectors through a (fan_in -> fan_out) linear layer: 2*rows*fan_in*fan_out."""
    return 2 * rows * fan_in * fan_out


def mlp(dims: tuple[int, ...] | list[int], rows: int = 1) -> int:
    """A stack of linear layers dims[0] -> dims[1] -> ... -> dims[-1]."""
    return sum(linear(rows, a, b) for a, b in zip(dims, dims[1:]))


def conv_transpose2d(w: int, h: int, c: int, b: int, k: int, f: int = 2) -> int:
    """Transposed convolution with kernel = stride = f (no overlap): each of the w*h input
    pixels spreads c -> k channels over an f x f patch: 2*w*h*c*k*f*f*b."""
    return 2 * w * h * c * k * f * f * b


def unet_forward(image: int, in_channels: int, classes: int, base: int, depth: int, batch: int = 1) -> int:
    """U-Net forward on a square image (3x3 convolutions padded, so sizes halve only by pooling).

    Encoder: two 3x3 convolutions per level (in -> base, then base*2^i at level i, side
    image/2^i), 2x2 max-pooling between levels. Decoder, from the bottom up: a 2x2 stride-2
    transposed convolution halving the channels, concatenation with the skip connection,
    two 3x3 convolutions (2c -> c, c -> c). Then a 1x1 convolution to the classes.
    """
    if image % (2 ** depth):
        raise ValueError(f"image side {image} is not a multiple of 2**{depth}")
    b, s = batch, image

    def double(side: int, cin: int, cout: int) -> int:
        return conv2d(side, side, cin, b, cout, 3, 3, 1, 1) + conv2d(side, side, cout, b, cout, 3, 3, 1, 1)

    total = double(s, in_channels, base)
    for level in range(1, depth + 1):
        s //= 2
        total += double(s, base * 2 ** (level - 1), base * 2 ** level)
    for level in range(depth, 0, -1):
        cin, cout = base * 2 ** level, base * 2 ** (level - 1)
        total += conv_transpose2d(s, s, cin, b, cout)
        s *= 2
        total += double(s, 2 * cout, cout)
    return total + conv2d(s, s, base, b, classes, 1, 1)


def resnet_forward(image: int, layers: tuple[int, ...] | list[int], base: int = 64, classes: int = 1000,
                   in_channels: int = 3, batch: int = 1, expansion: int = 4) -> int:
    """Bottleneck ResNet forward (ResNet-50 = layers (3,4,6,3)), v1.5: stride on the 3x3 conv.

    Stem: 7x7 stride-2 convolution (in -> base), 3x3 stride-2 max-pooling. Stage i: width
    base*2^i, blocks of 1x1 (-> width), 3x3 (stride 2 in the first block of stages 2..4),
    1x1 (-> 4 x width); the first block of each stage adds a 1x1 projection of its input.
    Then global average pooling and the fully connected layer to the classes.
    """
    b = batch
    total = conv2d(image, image, in_channels, b, base, 7, 7, 3, 3, 2, 2)
    s = conv_out(conv_out(image, 7, 3, 2), 3, 1, 2)
    cin = base
    for stage, blocks in enumerate(layers):
        width = base * 2 ** stage
        cout = width * expansion
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            out = conv_out(s, 3, 1, stride)
            total += conv2d(s, s, cin, b, width, 1, 1)
            total += conv2d(s, s, width, b, width, 3, 3, 1, 1, stride, stride)
            total += conv2d(out, out, width, b, cout, 1, 1)
            if block == 0:
                total += conv2d(s, s, cin, b, cout, 1, 1, 0, 0, stride, stride)
            s, cin = out, cout
    return total + linear(b, cin, classes)


def transformer_encoder_forward(batch: int, seq: int, hidden: int, layers: int) -> int:
    """``layers`` transformer layers (feed-forward 4h), bidirectional attention over the full square."""
    return layers * transformer_block_forward(batch, seq, hidden)


def bert_pretraining_forward(batch: int, seq: int, hidden: int, layers: int, vocab: int, predictions: int) -> int:
    """BERT pre-training forward: the encoder, the MLM head on the ``predictions`` masked
    positions of each sequence (transform h x h, decoder h x V) and the NSP head on [CLS]
    (pooler h x h, classifier h x 2)."""
    h = hidden
    heads = batch * predictions * (linear(1, h, h) + linear(1, h, vocab)) + batch * (linear(1, h, h) + linear(1, h, 2))
    return transformer_encoder_forward(batch, seq, h, layers) + heads


def distilbert_classify_forward(batch: int, seq: int, hidden: int, layers: int, labels: int = 2) -> int:
    """DistilBERT sequence classification forward: the encoder, then on [CLS] the
    pre-classifier (h x h) and the classifier (h x labels)."""
    h = hidden
    return transformer_encoder_forward(batch, seq, h, layers) + batch * (linear(1, h, h) + linear(1, h, labels))


def braggnn_forward(patch: int = 11, channels: tuple[int, ...] = (64, 32, 8),
                    dense: tuple[int, ...] = (64, 32, 16, 8), batch: int = 1) -> int:
    """BraggNN forward: unpadded 3x3 convolutions (1 -> channels[0] -> ...), each shrinking the
    side by 2; after the first, a non-local block on its n = side^2 positions with c/2 inner
    channels (three 1x1 projections c -> c/2, the n x n attention: 2 products of 2*n*n*(c/2),
    a 1x1 projection back c/2 -> c); then dense layers to 2 outputs."""
    b = batch
    side = patch - 2
    c0 = channels[0]
    total = conv2d(patch, patch, 1, b, c0, 3, 3)
    n, inner = side * side, c0 // 2
    total += 3 * conv2d(side, side, c0, b, inner, 1, 1) + 2 * (2 * n * n * inner * b)
    total += conv2d(side, side, inner, b, c0, 1, 1)
    cin = c0
    for c in channels[1:]:
        total += conv2d(side, side, cin, b, c, 3, 3)
        side -= 2
        cin = c
    return total + mlp((cin * side * side, *dense, 2), b)


def uno_forward(cell: int, descriptors: int, fingerprints: int, feature_layers: tuple[int, ...],
                dense_layers: tuple[int, ...], drugs: int = 1, batch: int = 1) -> int:
    """CANDLE Uno forward: one sub-network per feature type (cell RNA-seq once, drug
    descriptors and fingerprints once per drug), their embeddings concatenated with the
    dose of each drug, then the dense layers down to the one response value."""
    sub = mlp((cell, *feature_layers)) + drugs * (mlp((descriptors, *feature_layers))
                                                  + mlp((fingerprints, *feature_layers)))
    width = drugs + feature_layers[-1] * (1 + 2 * drugs)
    return batch * (sub + mlp((width, *dense_layers, 1)))
