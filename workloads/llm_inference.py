"""LLM inference: a batch of concurrent requests through prefill and decode (study D.3).

``--concurrency`` requests arrive together, each with ``--input-len`` prompt tokens, and each
generates ``--output-len`` tokens (greedy, random weights: speed does not depend on their
values). One iteration serves the whole batch: prefill (every prompt in one forward pass,
which fills the KV cache and gives each request its first token), then ``output_len - 1``
decode steps of one token per request, each reading the cache. ``--warmup`` iterations are
untimed; ``--iters`` are timed, the device synchronised at each boundary. With several ranks
the model is tensor-parallel over them (one node; every rank serves the same batch).

Figures (definitions in db/glossary_metrics.yaml; perf-model.md, study D):
- ``ttft_p50_s``/``ttft_p90_s``/``ttft_p99_s``: time to first token = prefill time of the
  batch (all requests arrive at once: no queueing), percentiles over iterations.
- ``tpot_s``: time per output token after the first, per request = decode time /
  (output_len - 1), mean over iterations; ``tpot_p50_s`` its median.
- ``output_tokens_per_s`` (also the headline ``tokens_per_s``) = concurrency x output_len x
  iters / total timed time (prefill + decode); ``requests_per_s`` = concurrency x iters / total timed time;
  ``output_tokens_per_s_per_user`` = 1 / tpot_s.
- ``decode_bandwidth_gbs`` = bytes read by the timed decode steps (each reads every weight once,
  plus the KV cache at the step's context length) / their summed time; ``mbu`` = that /
  (devices x --peak-bandwidth-gbs).
- ``prefill_tflops`` = 2 x parameters x prompt tokens (+ attention 2 x 2 x layers x s^2/2 x
  hidden per request) / prefill time; ``prefill_mfu`` = that / (devices x --peak-tflops).

Decoding (``--decode``): ``static`` (the default) runs gpt-fast's static-KV-cache step
(``workloads/models/llama.py``), compiled by ``--compile`` (``auto``: on one CUDA device, where it is also
captured as a CUDA graph, ``mode="reduce-overhead"``; off elsewhere) so that a step is not bound by
launching its kernels; ``plain`` reads the cache up to the current position, eager, step by step.
Both give the same tokens. Compiling happens in an untimed first iteration (``compile_s``, its wall
time), never in a timed one.

Backends: ``builtin`` (this file; the default and the one the tests run) or ``vllm`` (vLLM's
offline engine with dummy weights, ``load_format="dummy"``, when vLLM is installed).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable, Sequence

import torch

from workloads.harness import Refused, Session, run_workload
from workloads.harness.timing import first_step_time, percentile
from workloads.models.llama import SIZES, Llama, LlamaConfig, kv_bytes_per_token, num_params

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

BACKENDS = ("builtin", "vllm")


def build_model(cfg: LlamaConfig, tp: int, dtype: torch.dtype, device: torch.device) -> Llama:
    """The model, its weights made in ``dtype`` on ``device``.

    Made in fp32 and cast, a 7B model's peak on the H200 was its fp32 weights (27.2 GB beside
    13.5 GB of bf16 ones, 2026-11-27, benchmarks/RESULTS.md), which no server ever holds.
    """
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with device:
            return Llama(cfg, tp=tp).eval()
    finally:
        torch.set_default_dtype(default_dtype)


def prefill_flops(cfg: Any, n_params: int, batch: int, input_len: int) -> float:
    """Forward FLOPs of the prompts: 2 per parameter per token (embedding lookup excluded) plus
    causal attention, QK^T and AV over half the s x s square, per layer."""
    matmul_params = n_params - cfg.vocab_size * cfg.n_embd
    attention = 2 * 2 * cfg.n_layer * cfg.n_embd * input_len * input_len / 2
    return batch * (2.0 * matmul_params * input_len + attention)


def decode_bytes(cfg: Any, n_params: int, element_bytes: int, batch: int, context: int) -> float:
    """Bytes one decode step reads: every weight once (the embedding only for the batch's rows)
    and the KV cache of ``context`` tokens for each request."""
    weights = (n_params - cfg.vocab_size * cfg.n_embd) * element_bytes
    return weights + batch * context * kv_bytes_per_token(cfg, element_bytes)


def _builtin(session: Session) -> dict[str, Any]:
    args = session.args
    cfg = SIZES[args.model]
    batch, s_in, s_out = args.concurrency, args.input_len, args.output_len
    if min(batch, s_in, s_out) < 1:
        raise Refused(f"concurrency, input and output lengths must be positive (got {batch}, {s_in}, {s_out})")
    if s_in + s_out > cfg.max_seq:
        raise Refused(f"{s_in} + {s_out} tokens exceed {args.model}'s {cfg.max_seq} positions")
    tp = session.world_size
    if tp > 1:
        session.ensure_process_group()
    dtype = session.precision.dtype if session.precision.dtype in (torch.float16, torch.bfloat16) else torch.float32
    torch.manual_seed(args.seed)  # every rank builds the same weights (only its shard is used)
    try:
        model = build_model(cfg, tp, dtype, session.device.torch_device)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    model.allocate(batch, s_in + s_out)
    gen = torch.Generator(device="cpu").manual_seed(1000 + args.seed)
    prompts = torch.randint(0, cfg.vocab_size, (batch, s_in), generator=gen).to(session.device.torch_device)
    dev = session.device
    compiled = compiles(args.compile, dev.type, tp)
    decode = decoder(model, args.decode, compiled, args.compile_backend, dev.type)
    first_position = torch.tensor([s_in], device=dev.torch_device)

    def serve(clock: Any) -> None:
        """One iteration: prefill, then decode; ``clock`` marks prefill end and each decode step."""
        token = model(prompts, 0).argmax(-1, keepdim=True)
        clock.lap()
        position = first_position.clone()  # on the device: the next step's position, moved there
        for _ in range(s_out - 1):
            token = decode(token, position)
            position += 1
            clock.lap()

    compile_s = None
    if compiled:
        compile_s = session.max_all(first_step_time(dev, lambda: serve(_NoClock())))  # untimed
    for _ in range(args.warmup):
        serve(_NoClock())
    prefill_times: list[float] = []
    decode_times: list[list[float]] = []
    for _ in range(args.iters):
        session.barrier()
        clock = session.clock()
        clock.start(s_out)  # a lap for the prefill, then one per decoded token after the first
        serve(clock)
        laps = session.slowest_steps(clock.times())  # a step ends when its slowest rank does
        prefill_times.append(laps[0])
        decode_times.append(laps[1:])
    dev.synchronize()

    n_params = num_params(cfg)
    element = torch.tensor([], dtype=dtype).element_size()
    total = math.fsum(prefill_times) + math.fsum(math.fsum(d) for d in decode_times)
    tpots = [math.fsum(d) / len(d) for d in decode_times if d]
    # Bytes read by every timed decode step over their summed time (total over total).
    decode_time = math.fsum(math.fsum(d) for d in decode_times)
    decode_read = math.fsum(decode_bytes(cfg, n_params, element, batch, s_in + i + 1)
                            for d in decode_times for i in range(len(d)))
    flops = prefill_flops(cfg, n_params, batch, s_in)
    prefill_rate = flops * len(prefill_times) / math.fsum(prefill_times)
    figures: dict[str, Any] = {
        "ttft_p50_s": percentile(prefill_times, 50),
        "ttft_p90_s": percentile(prefill_times, 90),
        "ttft_p99_s": percentile(prefill_times, 99),
        "ttft_mean_s": statistics.fmean(prefill_times),
        "output_tokens_per_s": batch * s_out * args.iters / total,
        # The headline tokens/s of every workload: here the generated tokens (the work served).
        "tokens_per_s": batch * s_out * args.iters / total,
        "requests_per_s": batch * args.iters / total,
        "prefill_tokens_per_s": batch * s_in * len(prefill_times) / math.fsum(prefill_times),
        "prefill_tflops": prefill_rate / 1e12,
        "prefill_mfu": session.mfu(prefill_rate),
        "timed_time_s": total,
        "model_params": n_params,
        "kv_cache_bytes": batch * (s_in + s_out) * kv_bytes_per_token(cfg, element),
        "concurrency": batch,
        "input_len": s_in,
        "output_len": s_out,
    }
    if compile_s is not None:
        figures["compile_s"] = compile_s
    if tpots:
        figures.update({
            "tpot_s": statistics.fmean(tpots),
            "tpot_p50_s": percentile(tpots, 50),
            "output_tokens_per_s_per_user": 1.0 / statistics.fmean(tpots),
        })
    if decode_time > 0:
        bandwidth = decode_read / decode_time
        figures["decode_bandwidth_gbs"] = bandwidth / 1e9
        peak = args.peak_bandwidth_gbs
        figures["mbu"] = bandwidth / (session.world_size * peak * 1e9) if peak > 0 else None
    # The step times in the metrics file are whole iterations (prefill + decode).
    figures["_iteration_times"] = [p + math.fsum(d) for p, d in zip(prefill_times, decode_times)]
    return figures


class _NoClock:
    def lap(self) -> None:
        pass


DECODES = ("static", "plain")


def compiles(setting: str, device_type: str, ranks: int = 1) -> bool:
    """Whether ``--compile`` (auto | true | false) compiles the decode step. auto: on one CUDA
    device (a tensor-parallel step's all-reduce inside a captured graph has not run on a GPU here)."""
    if setting not in ("auto", "true", "false"):
        raise Refused(f"--compile {setting!r}: expected auto, true or false")
    return device_type == "cuda" and ranks == 1 if setting == "auto" else setting == "true"


def decoder(model: Llama, how: str, compiled: bool, backend: str, device_type: str) -> Step:
    """The decode step, ``(token (b, 1), position (1,)) -> next token (b, 1)``, as ``--decode`` and
    ``--compile`` ask: the plain step reads the position back to the host each step (eager only);
    the static one keeps it on the device, compiled whole (fullgraph: a graph break would leave it
    launch-bound again) and, on CUDA with inductor, replayed as a CUDA graph."""
    if how not in DECODES:
        raise Refused(f"--decode {how!r}: expected one of {', '.join(DECODES)}")
    if how == "plain":
        if compiled:
            raise Refused("--decode plain runs eager (its shapes change every step); --decode static compiles")
        return lambda token, position: model(token, int(position)).argmax(-1, keepdim=True)

    def static(token: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        return model.step(token, position).argmax(-1, keepdim=True)

    if not compiled:
        return static
    mode = "reduce-overhead" if device_type == "cuda" and backend == "inductor" else None
    step = torch.compile(static, fullgraph=True, backend=backend, mode=mode)
    # A CUDA graph's output is overwritten by its next replay: the token is copied out of it.
    return lambda token, position: step(token, position).clone()


def _vllm(session: Session) -> dict[str, Any]:
    """vLLM's offline engine with random (dummy) weights, the same requests and figures.
    Untested here (no GPU and no vLLM on the project's machines): see the README."""
    try:
        from vllm import LLM, SamplingParams  # type: ignore[import-not-found]
    except ImportError as exc:
        raise Refused("--backend vllm needs vLLM, which is not installed here (pip install vllm on a GPU node); "
                      "--backend builtin runs without it") from exc
    import json
    import tempfile
    import time

    args = session.args
    cfg = SIZES[args.model]
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.n_embd,
              "intermediate_size": cfg.ffn, "num_hidden_layers": cfg.n_layer, "num_attention_heads": cfg.n_head,
              "num_key_value_heads": cfg.n_kv_head, "vocab_size": cfg.vocab_size,
              "max_position_embeddings": cfg.max_seq, "rms_norm_eps": 1e-5, "rope_theta": cfg.rope_theta,
              "torch_dtype": "bfloat16" if session.precision.name == "bf16" else "float16"}
    folder = tempfile.mkdtemp(prefix="orch-vllm-")
    with open(f"{folder}/config.json", "w") as handle:
        json.dump(config, handle)
    llm = LLM(model=folder, load_format="dummy", skip_tokenizer_init=True, tensor_parallel_size=session.world_size,
              dtype=config["torch_dtype"], max_model_len=args.input_len + args.output_len, seed=args.seed)
    gen = torch.Generator(device="cpu").manual_seed(1000 + args.seed)
    prompts = [{"prompt_token_ids": torch.randint(0, cfg.vocab_size, (args.input_len,), generator=gen).tolist()}
               for _ in range(args.concurrency)]
    first = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0)
    full = SamplingParams(max_tokens=args.output_len, ignore_eos=True, temperature=0)
    for _ in range(args.warmup):
        llm.generate(prompts, full, use_tqdm=False)
    ttft, whole = [], []
    for _ in range(args.iters):
        began = time.perf_counter()
        llm.generate(prompts, first, use_tqdm=False)
        ttft.append(time.perf_counter() - began)
        began = time.perf_counter()
        llm.generate(prompts, full, use_tqdm=False)
        whole.append(time.perf_counter() - began)
    total = math.fsum(whole)
    tpots = [max(w - t, 0.0) / max(1, args.output_len - 1) for w, t in zip(whole, ttft)]
    return {"ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90), "ttft_p99_s": percentile(ttft, 99),
            "ttft_mean_s": statistics.fmean(ttft), "tpot_s": statistics.fmean(tpots),
            "tokens_per_s": args.concurrency * args.output_len * len(whole) / total,
            "tpot_p50_s": percentile(tpots, 50),
            "output_tokens_per_s": args.concurrency * args.output_len * len(whole) / total,
            "requests_per_s": args.concurrency * len(whole) / total, "timed_time_s": total,
            "model_params": num_params(cfg), "concurrency": args.concurrency, "input_len": args.input_len,
            "output_len": args.output_len, "_iteration_times": whole}


def body(session: Session) -> None:
    if session.args.backend not in BACKENDS:
        raise Refused(f"--backend {session.args.backend!r}: expected one of {', '.join(BACKENDS)}")
    figures = (_vllm if session.args.backend == "vllm" else _builtin)(session)
    iterations = figures.pop("_iteration_times")
    session.finish(figures, iterations, already_gathered=True,
                   extra={"inference": {"backend": session.args.backend, "concurrency": session.args.concurrency,
                                        "input_len": session.args.input_len, "output_len": session.args.output_len}})


def main(argv: Sequence[str] | None = None) -> int:
    return run_workload("llm_inference", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
