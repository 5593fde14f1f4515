"""Hugging Face's own OpenAI-compatible server (``transformers serve``) over a random-weight Llama.

The ``transformers`` backend of ``llm_serving``: a third-party server (not orch's) that runs on a
CPU and batches requests continuously (``--continuous-batching``: paged attention, requests join
and leave the running batch per step), so arrivals and batching are real on a machine without a
GPU. It runs under the serving environment's Python (``.venv-serving``, made by
scripts/setup_serving.sh), never the workload's: run as a script, it imports nothing of orch.

Before serving, it writes beside the ``config.json`` in ``MODEL_DIR`` (orch's Llama config, the
one vLLM's dummy load format reads) what ``transformers serve`` loads: seeded random weights, a
word-level tokenizer whose tokens are ``t0`` ... ``t{vocab-1}`` (a prompt of N such words is N
tokens, as the load generator's ``text`` requests are), and a generation config without an
end-of-sequence token, so every request generates exactly its ``max_tokens``.

    python workloads/serving/hf_server.py MODEL_DIR --host H --port P --seed S --dtype float32 [EXTRA ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def word(token_id: int) -> str:
    """The text of token ``token_id`` (workloads/serving/loadgen.py writes prompts with the same words)."""
    return f"t{token_id}"


def write_model(model_dir: Path, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = json.loads((model_dir / "config.json").read_text())
    vocab = int(config["vocab_size"])
    config.update(bos_token_id=None, eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**config))
    model.generation_config = GenerationConfig(bos_token_id=None, eos_token_id=None, pad_token_id=0,
                                               do_sample=False)
    model.save_pretrained(model_dir)
    words = models.WordLevel({word(i): i for i in range(vocab)}, unk_token=word(0))
    tokenizer = Tokenizer(words)
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Decoded words are joined by spaces (a client's prompt decoded from ids is its words again).
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    # No special tokens: a client decoding with skip_special_tokens (GuideLLM's synthetic prompts,
    # made of words outside the vocabulary: all t0) would otherwise get empty text.
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(model_dir)


def accept_vllm_fields() -> None:
    """Let /v1/completions take vLLM's ``ignore_eos`` and ``min_tokens`` (GuideLLM and AIPerf send
    them to ask for exact output lengths) instead of refusing the request as having unknown
    fields: here they are moot, as the model has no end-of-sequence token to stop at."""
    from transformers.cli.serving import completion

    class Params(completion.TransformersTextCompletionCreateParams, total=False):  # type: ignore[call-arg]
        ignore_eos: bool
        min_tokens: int

    completion.CompletionHandler._valid_params_class = Params


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    args, extra = parser.parse_known_args(argv)
    write_model(args.model_dir, args.seed)
    import os

    # No network: the model is local, and the CLI's once-a-day PyPI version check is skipped.
    os.environ.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_UPDATE_CHECK="1", HF_HUB_DISABLE_TELEMETRY="1")
    from transformers.cli.transformers import app

    accept_vllm_fields()

    sys.argv = ["transformers", "serve", str(args.model_dir), "--continuous-batching", "--device", "cpu",
                "--dtype", args.dtype, "--host", args.host, "--port", str(args.port), *extra]
    app()


if __name__ == "__main__":
    main()
