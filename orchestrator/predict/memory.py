"""Device memory one rank needs, predicted from parameters (perf-model.md). No torch.

The orchestrator skips a run predicted not to fit. Estimates, not promises: the
framework's fixed overhead (context, allocator fragmentation, communication
buffers) is not included; the site profile adds it (``device.fixed_memory_gb``).

:func:`predicted_bytes` is what the orchestrator asks: for gpt2, where torch is
importable, the peak traced from the workload's own training step
(``orchestrator/predict/memory_trace.py``, within 10% of the measured peak where the formulas
below were 30-43% low); else, and for the other workloads, the formula.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import workloads
from orchestrator.predict import pretraced
from orchestrator.predict.memory_inputs import ACCUM_TRACED, DEEPSPEED, STRATEGIES, TRACED, Inputs, _int, model_config  # noqa: F401
from orchestrator.predict.states import model_state_bytes  # noqa: F401  (the floor; re-exported)
from workloads import flops, layouts, shapes
from workloads.models.configs import SIZES, GPTConfig

BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# Bytes of a logit as the output head makes it: an fp8 run's head is a bf16 GEMM (Transformer Engine
# and torchao's float8 convert only the layers' linears), so its logits are 16-bit.
LOGIT_BYTES = {**BYTES, "fp8": 2}


def activation_bytes(layers: int, batch: int, seq: int, hidden: int, vocab: int, precision: str) -> float:
    """Korthikanti et al.: s*b*h*34 per layer with fused (SDPA/flash) attention, 16-bit activations
    (doubled for fp32; fp8 runs save them in bf16 too, as torchao's float8 linears save their
    high-precision inputs: an upper bound for Transformer Engine, which saves fp8 copies), plus the
    logits, their fp32 copy for the loss and its gradient."""
    scale = 2 if BYTES.get(precision, 4) == 4 else 1
    per_layer = seq * batch * hidden * 34 * scale
    logits = batch * seq * vocab * (LOGIT_BYTES.get(precision, 4) + 4 + 4)
    return layers * per_layer + logits


def gpt_training(p: dict[str, Any], *, default_model: str = "gpt2", vocab: int | None = None,
                 default_batch: int = 8, default_seq: int = 1024, config: GPTConfig | None = None) -> int:
    """Per-rank bytes of a GPT training run, by formula (the traced prediction's fallback, and the
    only prediction of tensor/pipeline/context layouts, ``tp``/``pp``/``cp`` > 1).

    Layouts (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
    Models"): a rank holds the largest stage's blocks (ceil(L/pp)) and the embedding, its
    linears and vocabulary divided by tp (position embedding and LayerNorms replicated),
    the states split further over dp by the strategy. Activations per layer s*b*h*(10 + 24/tp)
    (34/tp with sequence parallel; 2/tp, the block's input, with full checkpointing, plus one
    layer's recompute); the first stage keeps min(micro-batches, pp) micro-batches in flight
    under 1F1B, all of them under GPipe; the logits (vocabulary / tp) only on the last stage.
    Context parallel (cp): a rank's activations and logits for s/cp tokens, plus the keys and
    values it gathers from the others; the states are spread over dp x cp ranks as over dp.
    ``config``: a shape that is no preset (`orch predict`'s custom shapes and GPT-3 175B/1T) instead of
    ``p["model"]``'s.
    """
    cfg = config or SIZES[str(p.get("model") or default_model)]
    # Character tokens: the text's alphabet, at most 256 for the texts here (67 for shakespeare).
    data_vocab = 256 if str(p.get("tokenizer") or "") == "char" else cfg.vocab_size
    vocab = vocab or _int(p, "vocab_size", data_vocab)
    seq = _int(p, "seq_len", default_seq)
    batch = _int(p, "batch_size", default_batch)
    precision = str(p.get("precision") or "fp32")
    block = _int(p, "block_size", max(seq, cfg.block_size))
    untied = str(p.get("tie_weights", True)).lower() in ("false", "0")
    tp, pp, cp = max(1, _int(p, "tp", 1)), max(1, _int(p, "pp", 1)), max(1, _int(p, "cp", 1))
    devices = _int(p, "devices", 1)
    dp = max(1, devices // (tp * pp))  # the ranks the states are sharded or replicated over (cp ranks included)
    full_seq, seq = seq, seq // cp  # context parallel: a rank's tokens of each sequence
    sp = str(p.get("sequence_parallel", False)).lower() in ("true", "1")
    checkpointing = layouts.checkpointing_on(p.get("activation_checkpointing"))
    layers = -(-cfg.n_layer // pp)  # the largest stage's blocks
    embedding = vocab * (2 if untied and pp == 1 else 1) * cfg.n_embd
    n = (embedding + layers * flops.transformer_layer_params(cfg.n_embd)) / tp + block * cfg.n_embd
    states = model_state_bytes(int(n), str(p.get("strategy") or "ddp"), dp, precision)
    scale = 2 if BYTES.get(precision, 4) == 4 else 1
    full_layer = seq * batch * cfg.n_embd * (34 / tp if sp else 10 + 24 / tp) * scale
    if cp > 1:  # the keys and values gathered from the other cp ranks, kept for the backward (16-bit)
        full_layer += 2 * 2 * (full_seq - seq) * batch * cfg.n_embd * scale
    if str(p.get("attention") or "sdpa") == "manual":
        # Unfused attention keeps its softmax output, the dropout mask and the dropout output:
        # Korthikanti et al.'s 5*a*s^2*b bytes per layer, but the workload's softmax runs in fp32 as
        # CUDA's autocast runs it (workloads/models/gpt.py): 4 + 1 + 2 = 7 in 16-bit training,
        # 4 + 1 + 4 = 9 in fp32; heads split by tp; under context parallel a rank's s/cp queries
        # against all s keys.
        full_layer += (9 if scale == 2 else 7) * cfg.n_head * seq * full_seq * batch / tp
    kept_layer = seq * batch * cfg.n_embd * 2 * scale / (tp if sp else 1) if checkpointing else full_layer
    recompute = full_layer if checkpointing else 0.0
    logits = activation_bytes(0, batch, seq, 1, vocab, precision) / tp
    if pp == 1:
        activations = layers * kept_layer + recompute + logits
    else:
        micro = max(1, _int(p, "microbatches", 0) or (_int(p, "grad_accum", 1) if _int(p, "grad_accum", 1) > 1 else pp))
        in_flight = micro if str(p.get("pp_schedule") or "1f1b") == "gpipe" else min(micro, pp)
        activations = max(layers * kept_layer * in_flight, layers * kept_layer + logits) + recompute
    return int(states + activations)


def transformer_block(p: dict[str, Any]) -> int:
    h = _int(p, "hidden", 1600)
    seq, batch = _int(p, "seq_len", 1024), _int(p, "batch_size", 8)
    precision = str(p.get("precision") or "fp32")
    weights = 2 * 4 * flops.transformer_layer_params(h)  # fp32 weights and their gradients
    return int(weights + activation_bytes(1, batch, seq, h, 0, precision) * 2)  # + gradients of activations


def conv2d(p: dict[str, Any]) -> int:
    d = shapes.resolve(shapes.CONV2D, str(p.get("shape") or "deepbench-0"), {
        "w": p.get("width"), "h": p.get("height"), "c": p.get("channels"), "b": p.get("batch_size"),
        "k": p.get("filters"), "fw": p.get("filter_w"), "fh": p.get("filter_h"), "pw": p.get("pad_w"),
        "ph": p.get("pad_h")})
    sw, sh = max(1, _int(p, "stride_w", 1)), max(1, _int(p, "stride_h", 1))
    out = flops.conv_out(d["w"], d["fw"], d["pw"], sw) * flops.conv_out(d["h"], d["fh"], d["ph"], sh)
    elements = d["b"] * d["c"] * d["w"] * d["h"] + d["b"] * d["k"] * out + d["k"] * d["c"] * d["fw"] * d["fh"]
    factor = 2 if str(p.get("backward", False)).lower() in ("true", "1") else 1
    return elements * BYTES.get(str(p.get("precision") or "fp32"), 4) * factor


def relu(p: dict[str, Any]) -> int:
    d = shapes.resolve(shapes.RELU, str(p.get("shape") or "deepbench-0"), {
        "w": p.get("width"), "h": p.get("height"), "c": p.get("channels"), "b": p.get("batch_size")})
    elements = d["w"] * d["h"] * d["c"] * d["b"]
    factor = 4 if str(p.get("backward", False)).lower() in ("true", "1") else 2
    return elements * BYTES.get(str(p.get("precision") or "fp32"), 4) * factor


def allreduce(p: dict[str, Any]) -> int:
    sizes = [int(float(x)) for x in str(p.get("sizes") or "0").split(",") if x.strip()]
    return 2 * max(sizes or [0]) * BYTES.get(str(p.get("precision") or "fp32"), 4)


# ------------------------------------------------------------------ traced predictions
# What a traced prediction (orchestrator/predict/memory_trace.py) depends on, and its cache: here,
# without torch, so that a plan whose shapes are all cached never imports torch.

# The predictor's own files (this folder) and the workload code it traces (workloads/).
_PREDICTOR_CODE = ("memory.py", "memory_inputs.py", "states.py", "traces.py", "memory_trace.py", "zero_step.py")
# The cache's own version, in every key: 2 since DeepSpeed's part became its documented states and
# buffers (issue 25; version 1 held the fitted model that went below the sharded states).
CACHE_VERSION = 2
_WORKLOAD_CODE = ("strategies.py", "trainers.py", "context.py", "parallel.py", "lm.py", "layouts.py",
                  "harness/livebytes.py", "models/gpt.py", "models/configs.py")
_cache: dict[str, int] = {}
_code_version: str | None = None
# Told of every trace the caches do not hold (a fraction of a second to a second each, minutes for
# a new campaign of many shapes): `orch plan` shows which shape it is tracing instead of going silent.
_trace_listeners: list[Callable[[Inputs], None]] = []
WORKERS_ENV = "ORCH_TRACE_WORKERS"  # processes tracing side by side (default: this process's cores)


@contextlib.contextmanager
def on_trace(listener: Callable[[Inputs], None]) -> Iterator[None]:
    """Call ``listener(inputs)`` for every uncached trace made inside the block (before it, when
    traced in this process; as it finishes, when traced in a worker process)."""
    _trace_listeners.append(listener)
    try:
        yield
    finally:
        _trace_listeners.remove(listener)


def _told(inputs: Inputs) -> None:
    for listener in _trace_listeners:
        listener(inputs)


def describe(inputs: Inputs) -> str:
    """A traced shape in a few words (for progress lines)."""
    c = inputs.cfg
    return (f"{c.n_layer} layers x {c.n_embd}, {inputs.strategy} on {inputs.devices} rank(s)"
            + (f" (cp {inputs.cp})" if inputs.cp > 1 else "")
            + (f" (tp {inputs.tp}{', sequence parallel' if inputs.sequence_parallel else ''})" if inputs.tp > 1 else "")
            + f", {inputs.precision}, "
            f"batch {inputs.batch} x {inputs.seq}" + (f", accumulating {inputs.accum}" if inputs.accum > 1 else ""))


def torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def table_stamp() -> tuple[str, int]:
    """What a shipped table must have been traced with to serve this install (pretraced.py)."""
    return torch_version(), CACHE_VERSION


def code_version() -> str:
    """Hash of the workload code a prediction runs, and torch's version (the disk cache's keys)."""
    global _code_version
    if _code_version is None:
        h = hashlib.sha256(torch_version().encode())
        here = Path(__file__).parent
        workloads_dir = Path(workloads.__file__).parent
        for path in [here / n for n in _PREDICTOR_CODE] + [workloads_dir / n for n in _WORKLOAD_CODE]:
            h.update(path.read_bytes())
        _code_version = h.hexdigest()[:16]
    return _code_version


def cache_dir() -> Path:
    env = os.environ.get("ORCH_MEMORY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "orch" / "memory"


def _key(inputs: Inputs) -> str:
    text = json.dumps({"inputs": repr(inputs), "code": code_version(), "version": CACHE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _lookup(key: str, inputs: Inputs) -> int | None:
    """A prediction from this process, the disk cache or the table shipped with orch, or None."""
    found = _cache.get(key)
    if found is None:
        try:
            found = _cache[key] = int(json.loads((cache_dir() / f"{key}.json").read_text())["bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            found = pretraced.lookup(repr(inputs), table_stamp())  # the shapes shipped with orch
            if found is None:
                return None
            _cache[key] = found
    return found


def _store(key: str, inputs: Inputs, found: int) -> None:
    _cache[key] = found
    path = cache_dir() / f"{key}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"bytes": found, "inputs": repr(inputs)}))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: the in-process cache still serves this plan


def _check_strategy(inputs: Inputs) -> None:
    from orchestrator.predict.traces import FORWARD_BACKWARD

    if inputs.strategy not in STRATEGIES and inputs.strategy != FORWARD_BACKWARD:
        raise ValueError(f"unknown strategy {inputs.strategy!r} (known: {', '.join(STRATEGIES)})")


def cached_trace(inputs: Inputs, compute: Callable[[Inputs], int]) -> int:
    """``compute(inputs)``, or its result from this process or the disk cache (no torch needed).
    ``inputs`` are normalized first (``traces.normalized``: e.g. DDP beyond 2 ranks as 2)."""
    from orchestrator.predict.traces import normalized

    _check_strategy(inputs)
    inputs = normalized(inputs)
    key = _key(inputs)
    found = _lookup(key, inputs)
    if found is None:
        found = compute(inputs)
        _store(key, inputs, found)
    return found


# Workloads whose memory is traced from their own program (orchestrator/predict/memory_trace.py), and
# the model they default to.
TRACED_WORKLOADS = {"gpt2": "gpt2"}
_torch_present: bool | None = None


class _NoTorch(Exception):
    """Tracing needs torch, which this interpreter lacks."""


def _has_torch() -> bool:
    global _torch_present
    if _torch_present is None:
        _torch_present = importlib.util.find_spec("torch") is not None
    return _torch_present


def _trace_here(leaf: Inputs) -> int:
    """One leaf traced in this process (torch imported only now: a warm plan never needs it)."""
    if not _has_torch():
        raise _NoTorch  # a login node without torch: the formula
    _told(leaf)
    from orchestrator.predict import memory_trace as predict_memory

    return predict_memory.trace_leaf(leaf)


def compute(inputs: Inputs) -> int:
    """The prediction, put together from its leaves (``traces.combine``), each from the caches or traced."""
    from orchestrator.predict import traces

    return traces.combine(inputs, lambda leaf: cached_trace(leaf, _trace_here))


def traced_inputs(workload: str, p: dict[str, Any]) -> Inputs | None:
    """What the traced prediction of a run depends on, or None where the workload has none, the
    layout is not traced (tensor/pipeline: the formula) or tracing is off (``ORCH_MEMORY_TRACE=0``)."""
    model = TRACED_WORKLOADS.get(workload)
    if model is None or os.environ.get("ORCH_MEMORY_TRACE") == "0":
        return None
    if _int(p, "pp", 1) > 1:
        return None  # pipeline stages: the formula (gpt_training), not traced (orchestrator/predict/memory_trace.py)
    inputs = Inputs.of(p, model)
    if inputs.tp > 1 and (inputs.strategy != "ddp" or inputs.cp > 1):
        return None  # FSDP over a tensor-parallel mesh: the formula; ZeRO and cp with tp are refused anyway
    if inputs.cp > 1 and inputs.strategy not in TRACED:
        return None  # DeepSpeed refuses context parallel (workloads/layouts.py)
    return inputs


# What a memory prediction came from (``orch plan``'s ``mem_from``): the program traced on fake
# tensors; for DeepSpeed, its traced forward/backward plus its documented sharded states and buffers
# (``traces.deepspeed_bytes``); or the formula (``gpt_training`` and the other workloads' own),
# where tracing cannot go (pipeline stages, FSDP over a tensor-parallel mesh, no torch,
# ``ORCH_MEMORY_TRACE=0``). The formula is the least exact (see README, "Predicted memory").
FROM_TRACE, FROM_TRACE_AND_MODEL, FROM_FORMULA = "trace", "trace+model", "formula"


def _program(workload: str, p: dict[str, Any]) -> tuple[int, str] | None:
    inputs = traced_inputs(workload, p)
    if inputs is None:
        return None
    try:
        found = cached_trace(inputs, compute)
    except _NoTorch:
        return None
    except Exception as exc:  # a shape or torch version the trace cannot follow: the formula, said once
        warnings.warn(f"memory of {workload} not traced ({type(exc).__name__}: {exc}); using the formula",
                      stacklevel=2)
        return None
    return found, FROM_TRACE_AND_MODEL if inputs.strategy in DEEPSPEED else FROM_TRACE


def program_bytes(workload: str, p: dict[str, Any]) -> int | None:
    """The traced prediction (from the cache where it is there, without torch), or None where the
    workload has none, tracing is switched off (``ORCH_MEMORY_TRACE=0``) or torch is absent."""
    found = _program(workload, p)
    return None if found is None else found[0]


def trace_workers() -> int:
    """Processes that trace side by side: ``$ORCH_TRACE_WORKERS``, else the cores this process may use."""
    value = os.environ.get(WORKERS_ENV, "").strip()
    if value:
        if value.isdigit() and int(value) >= 1:
            return int(value)
        raise ValueError(f"${WORKERS_ENV}: expected a whole number of processes >= 1, got {value!r}")
    return len(os.sched_getaffinity(0))


def _trace_in_worker(leaf: Inputs) -> int:
    """One leaf traced in a worker process of :func:`prefetch` (torch is imported there, not here)."""
    from orchestrator.predict import memory_trace as predict_memory

    return predict_memory.trace_leaf(leaf)


# Fewer uncached leaves than this are traced in the planning process, one after another: a worker
# process pays torch's import (~2 s) before its first trace (0.1-0.6 s each).
POOL_FROM = 4


def prefetch(all_inputs: Iterable[Inputs], workers: int) -> int:
    """Trace, side by side in up to ``workers`` processes, every leaf the predictions of ``all_inputs`` need
    that no cache holds; each result lands in the caches, so that predicting each run afterwards
    only reads them (and this process never imports torch). Returns how many leaves were traced.

    Why: a first plan of a campaign traces tens to hundreds of leaves, each a fraction of a second
    of one core; a login node has many cores. A leaf that fails in a worker is left uncached: the
    run's own prediction traces it again in this process and says why it could not (then uses the
    formula).
    """
    from orchestrator.predict import traces

    missing: dict[Inputs, None] = {}
    for inputs in all_inputs:
        try:
            _check_strategy(inputs)
        except ValueError:
            continue  # the run's own prediction says so
        inputs = traces.normalized(inputs)
        if _lookup(_key(inputs), inputs) is not None:
            continue
        for leaf in traces.leaves(inputs):
            if leaf not in missing and _lookup(_key(leaf), leaf) is None:
                missing[leaf] = None
    workers = min(workers, len(missing))
    if len(missing) < POOL_FROM or workers < 2 or not _has_torch():
        return 0
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    traced = 0
    # spawn: a fresh interpreter per worker (this process may hold threads or a process group).
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_trace_in_worker, leaf): leaf for leaf in missing}
        for future in as_completed(futures):
            leaf = futures[future]
            try:
                found = future.result()
            except Exception:
                continue
            _store(_key(leaf), leaf, found)
            traced += 1
            _told(leaf)
    return traced


def predicted(workload: str, p: dict[str, Any], formula: Callable[[dict[str, Any]], int]) -> tuple[int, str]:
    """Per-device peak tensor bytes, traced from the program where possible, else ``formula``; and
    which of them it is (``FROM_*``)."""
    found = _program(workload, p)
    return (formula(p), FROM_FORMULA) if found is None else found


def predicted_bytes(workload: str, p: dict[str, Any], formula: Callable[[dict[str, Any]], int]) -> int:
    """Per-device peak tensor bytes: traced from the program where possible, else ``formula``."""
    return predicted(workload, p, formula)[0]


def compute_bytes(inputs: Inputs) -> int:
    """The prediction itself: put together from its leaves (``traces.combine``), each cached."""
    return compute(inputs)


def predict_bytes(p: dict[str, Any], default_model: str = "gpt2") -> int:
    """Peak tensor bytes of one rank of the gpt2 run with values ``p``, traced (cached on disk)."""
    return cached_trace(Inputs.of(p, default_model), compute_bytes)
