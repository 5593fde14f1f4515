"""The model `orch predict` ranks layouts for: a gpt2 workload preset (workloads/models/configs.py),
one of the time model's own presets (GPT-3 175B and 1T, ViT-Base/Large/Huge/22B: study E's shapes),
or a custom shape (``--layers --hidden --heads --vocab --seq``).

Only the workload's presets can be measured (the gpt2 workload builds its model from ``SIZES``),
so only they have a traced memory; the others take the workload's memory formula with their own
shape (``memory.gpt_training(config=...)``). The GPT-3 and ViT presets stay here, not in ``SIZES``: the
gpt2 workload would offer them to sweeps and `orch plan` would trace a 175B program for them,
for models no campaign here can run.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import UserError
from orchestrator.predict.perfmodel.search import config_shape
from orchestrator.predict.perfmodel.transformer import ModelShape
from workloads.models.configs import SIZES, GPTConfig

# Megatron pads GPT-2's 50257 tokens to a multiple of 1024 (its --make-vocab-size-divisible-by
# times tp), and Narayanan et al. ran every size at sequence 2048.
MEGATRON_VOCAB = 51200
GPT3_SEQ = 2048
# Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC21, Table 1 (GPT-3 175B and the 1T model): layers, attention heads, hidden size.
# (GPT-3 175B's shape is Brown et al., "Language Models are Few-Shot Learners", 2020, Table 2.1:
# 96 layers, d_model 12288, 96 heads of 128, context 2048.)
#
# Vision transformers (study E's ViT, the science foundation models' image backbone), as the time
# model sees them: an encoder of the same blocks (4x MLP) over the image's patches, so the
# "sequence" is the patch count plus the class token, (224 / p)^2 + 1, and the "vocabulary" is the
# patch embedding's input, 3 x p x p values a token (its linear projection costs what a vocabulary
# of that size costs a token). Departures: the classification head is counted on every token, not
# on the class token alone (< 1% of a layer's FLOPs at these sizes), and attention is not causal
# (the model counts the full s x s square either way). Shapes: Dosovitskiy et al., "An Image is
# Worth 16x16 Words", ICLR 2021, Table 1 (ViT-Base 12 layers, hidden 768, 12 heads; Large 24,
# 1024, 16; Huge 32, 1280, 16, patch 14); Dehghani et al., "Scaling Vision Transformers to 22
# Billion Parameters", ICML 2023, Table 1 (ViT-22B: 48 layers, width 6144, 48 heads, MLP 24576 =
# 4x, patch 14). block_size is the default sequence at 224 x 224 pixels.
VIT_IMAGE = 224


def _vit(layers: int, heads: int, hidden: int, patch: int) -> GPTConfig:
    return GPTConfig(layers, heads, hidden, vocab_size=3 * patch * patch, block_size=(VIT_IMAGE // patch) ** 2 + 1)


PREDICT_PRESETS: dict[str, GPTConfig] = {
    "gpt3-175b": GPTConfig(96, 96, 12288, vocab_size=MEGATRON_VOCAB, block_size=GPT3_SEQ),
    "gpt3-1t": GPTConfig(128, 160, 25600, vocab_size=MEGATRON_VOCAB, block_size=GPT3_SEQ),
    "vit-base": _vit(12, 12, 768, 16),
    "vit-large": _vit(24, 16, 1024, 16),
    "vit-huge": _vit(32, 16, 1280, 14),
    "vit-22b": _vit(48, 48, 6144, 14),
}
CUSTOM = "custom"
WORKLOAD_SEQ = 1024  # `orch predict`'s sequence for a gpt2 workload preset, as before the presets here
# The custom-shape options in the order errors name them (CLI option: ModelSpec field).
SHAPE_OPTIONS = ("--layers", "--hidden", "--heads", "--vocab", "--seq")


@dataclass(frozen=True)
class ModelSpec:
    """What to rank layouts for: its name, its GPT config and whether the gpt2 workload runs it."""

    name: str
    config: GPTConfig
    workload_preset: bool  # in workloads/models/configs.py SIZES: traced memory, measurable
    default_seq: int

    def shape(self, seq_len: int) -> ModelShape:
        return config_shape(self.config, seq_len)

    @property
    def memory_from(self) -> str | None:
        """What memory_from says where no trace can exist (None: the run's own model decides)."""
        if self.workload_preset:
            return None
        what = "a custom shape" if self.name == CUSTOM else f"{self.name} is not a gpt2 workload preset"
        return f"formula (no trace: {what})"


def known_models() -> list[str]:
    return [*SIZES, *PREDICT_PRESETS]


def _custom(shape: dict[str, int | None], seq_len: int | None) -> ModelSpec:
    """The custom shape of ``shape`` (layers, hidden, heads, vocab) at ``seq_len``: all given,
    positive, hidden divisible by heads, else a one-line error naming what is wrong."""
    given = {**shape, "seq": seq_len}
    missing = [opt for opt, key in zip(SHAPE_OPTIONS, ("layers", "hidden", "heads", "vocab", "seq"))
               if given.get(key) is None]
    if missing:
        raise UserError(f"custom shape: missing {', '.join(missing)} (give all of {' '.join(SHAPE_OPTIONS)}, "
                        "or --model)")
    bad = [f"{opt} {given[key]}" for opt, key in zip(SHAPE_OPTIONS, ("layers", "hidden", "heads", "vocab", "seq"))
           if int(given[key] or 0) < 1]
    if bad:
        raise UserError(f"custom shape: {', '.join(bad)}: expected a whole number >= 1")
    layers, hidden, heads, vocab = (int(shape[k] or 0) for k in ("layers", "hidden", "heads", "vocab"))
    if hidden % heads:
        raise UserError(f"custom shape: --hidden {hidden} is not divisible by --heads {heads}")
    return ModelSpec(CUSTOM, GPTConfig(layers, heads, hidden, vocab_size=vocab, block_size=int(seq_len or 0)),
                     workload_preset=False, default_seq=int(seq_len or 0))


def resolve_model(model: str | None, shape: dict[str, int | None], seq_len: int | None) -> tuple[ModelSpec, int]:
    """The model of `orch predict`'s options and its sequence length (``seq_len``, else the model's):
    ``--model`` or the custom shape, not both and not neither."""
    custom = any(v is not None for v in shape.values())
    if model is not None and custom:
        given = [opt for opt, key in zip(SHAPE_OPTIONS, ("layers", "hidden", "heads", "vocab"))
                 if shape.get(key) is not None]
        raise UserError(f"--model {model} and {', '.join(given)}: give a preset or a custom shape, not both")
    if custom:
        spec = _custom(shape, seq_len)
    elif model is None:
        raise UserError(f"give --model (a preset) or a custom shape ({' '.join(SHAPE_OPTIONS)})")
    elif model in SIZES:
        spec = ModelSpec(model, SIZES[model], workload_preset=True, default_seq=WORKLOAD_SEQ)
    elif model in PREDICT_PRESETS:
        config = PREDICT_PRESETS[model]  # its own sequence: GPT-3's 2048, a ViT's patches at 224 x 224
        spec = ModelSpec(model, config, workload_preset=False, default_seq=config.block_size)
    else:
        raise UserError(f"unknown model {model!r} (known: {', '.join(known_models())}; or a custom shape: "
                        f"{' '.join(SHAPE_OPTIONS)})")
    seq = spec.default_seq if seq_len is None else seq_len
    if seq < 1:
        raise UserError(f"--seq-len {seq}: expected a whole number >= 1")
    return spec, seq
