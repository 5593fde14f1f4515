"""BERT (Devlin et al. 2019) and DistilBERT (Sanh et al. 2019) in plain PyTorch, readable top to bottom.

token ids (+ segment ids) -> word + position (+ segment) embeddings -> LayerNorm
-> n_layer x Layer -> heads
Layer (post-norm, as BERT): x = LN(x + Attention(x)); x = LN(x + FFN(x)), FFN = 4h GELU MLP.
Attention is bidirectional (no causal mask) through ``F.scaled_dot_product_attention``,
which picks a fused/flash kernel where the device has one.

Heads:
- ``BertForPreTraining``: masked-language-model head on the masked positions only (dense,
  GELU, LayerNorm, decoder tied to the word embeddings) and next-sentence prediction on
  [CLS] (pooler dense + tanh, 2-way classifier). Loss: the two cross-entropies summed.
- ``DistilBertForSequenceClassification``: on [CLS], pre-classifier dense + ReLU, classifier.
FLOPs: ``workloads.flops.bert_pretraining_forward`` and ``distilbert_classify_forward``.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn import functional as F

from workloads.models.sizes import BertConfig


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        if cfg.n_embd % cfg.n_head:
            raise ValueError(f"hidden size {cfg.n_embd} is not a multiple of {cfg.n_head} heads")
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.n_head, h // self.n_head).transpose(1, 2)
                   for t in self.qkv(x).split(h, dim=2))
        y = F.scaled_dot_product_attention(q, k, v)  # every token sees every token
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class Layer(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h = cfg.n_embd
        self.attn = SelfAttention(cfg)
        self.ln_1 = nn.LayerNorm(h, eps=1e-12)
        self.ffn = nn.Sequential(nn.Linear(h, 4 * h), nn.GELU(), nn.Linear(4 * h, h))
        self.ln_2 = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x))
        return self.ln_2(x + self.ffn(x))


class Encoder(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.word = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.position = nn.Embedding(cfg.max_positions, cfg.n_embd)
        self.segment = nn.Embedding(cfg.type_vocab_size, cfg.n_embd) if cfg.type_vocab_size else None
        self.ln = nn.LayerNorm(cfg.n_embd, eps=1e-12)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layer))
        self.apply(_init_weights)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        s = ids.shape[1]
        if s > self.cfg.max_positions:
            raise ValueError(f"sequence of {s} tokens exceeds {self.cfg.max_positions} positions")
        x = self.word(ids) + self.position(torch.arange(s, device=ids.device))
        if self.segment is not None and segments is not None:
            x = x + self.segment(segments)
        x = self.ln(x)
        for layer in self.layers:
            x = layer(x)
        return x


def _init_weights(module: nn.Module) -> None:
    """BERT's initialisation: normal(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


class BertForPreTraining(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h = cfg.n_embd
        self.bert = Encoder(cfg)
        self.mlm_transform = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.LayerNorm(h, eps=1e-12))
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))  # decoder weight: the word embeddings
        self.pooler = nn.Linear(h, h)
        self.nsp = nn.Linear(h, 2)
        self.mlm_transform.apply(_init_weights)
        self.pooler.apply(_init_weights)
        self.nsp.apply(_init_weights)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor,
                masked_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits of the masked positions (b, predictions, V) and of next-sentence (b, 2)."""
        x = self.bert(ids, segments)
        picked = torch.gather(x, 1, masked_positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
        mlm = F.linear(self.mlm_transform(picked), self.bert.word.weight, self.mlm_bias)
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        return mlm, nsp


def pretraining_loss(logits: tuple[torch.Tensor, torch.Tensor],
                     targets: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """MLM cross-entropy over the masked tokens + NSP cross-entropy, in fp32."""
    mlm, nsp = logits
    mlm_labels, nsp_labels = targets
    return (F.cross_entropy(mlm.float().reshape(-1, mlm.shape[-1]), mlm_labels.reshape(-1))
            + F.cross_entropy(nsp.float(), nsp_labels))


class DistilBertForSequenceClassification(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.bert = Encoder(cfg)
        self.pre_classifier = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.classifier = nn.Linear(cfg.n_embd, cfg.num_labels)
        self.pre_classifier.apply(_init_weights)
        self.classifier.apply(_init_weights)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        cls = self.bert(ids)[:, 0]
        return self.classifier(F.relu(self.pre_classifier(cls)))
