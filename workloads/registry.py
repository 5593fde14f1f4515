"""What workloads exist and which parameters they take.

This module must stay importable without torch: ``orch plan`` validates sweep files
against it on login nodes that have no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")
# Training workloads: fp8 training needs Transformer Engine-style scaling that these
# plain-PyTorch programs do not implement, so they do not offer it.
TRAINING_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda", "xpu", "hpu")
# The first-class sweep axes a workload may take (flags --batch-size, --seq-len, --strategy).
AXES: tuple[str, ...] = ("batch_size", "seq_len", "strategy")
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class Param:
    """One workload parameter, passed on the command line as ``--name-with-dashes VALUE``."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    # Command-line spelling when the name alone would be unsafe: launchers parse their own
    # options with abbreviations allowed, so ``torchrun ... -m workloads.gemm --m 8`` reads
    # ``--m`` as an ambiguous prefix of torchrun's ``--master-addr``/``--module``. The
    # workload also accepts ``--<name>`` by hand.
    flag_name: str | None = None

    @property
    def flag(self) -> str:
        return "--" + (self.flag_name or self.name).replace("_", "-")


@dataclass(frozen=True)
class Workload:
    """A benchmark program: its module, its parameters and what it can do."""

    name: str
    module: str
    summary: str
    params: tuple[Param, ...] = ()
    distributed: bool = False
    strategies: tuple[str, ...] = ("none",)
    precisions: tuple[str, ...] = PRECISIONS
    # The first-class sweep axes the program accepts besides devices and precision (``axes``), each
    # with its default when run by hand (the sweep always passes them).
    axis_defaults: dict[str, Any] = field(default_factory=dict, compare=False)
    # Extra text for ``--help`` (formulas, presets, examples).
    epilog: str = field(default="", compare=False)
    # Named model presets with their parameter counts (``orch workloads show`` prints them).
    presets: Callable[[], list[dict[str, Any]]] | None = field(default=None, compare=False)
    # Why the program would refuse these values (a run's values with devices, precision and the
    # axes filled in), or None: ``orch plan`` skips such a run with the reason instead of
    # submitting a job that can only fail at start. Pure Python, like this module.
    refusal: Callable[[dict[str, Any]], str | None] | None = field(default=None, compare=False)
    # A program that drives every device of the run from one process (an inference server with
    # tensor parallelism): the plan starts it once, on the allocation's first node with all its
    # devices, never through the site's per-rank launcher, and passes the run's device count as
    # this parameter (unless the sweep sets it). None: one process per device, as usual.
    devices_param: str | None = None

    @property
    def axes(self) -> frozenset[str]:
        return frozenset(self.axis_defaults)

    def __post_init__(self) -> None:
        unknown = set(self.axes) - set(AXES)
        if unknown:
            raise ValueError(f"workload {self.name}: unknown axes {sorted(unknown)} (known: {AXES})")

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params + self.axis_params() if p.name == name), None)

    def axis_params(self) -> tuple[Param, ...]:
        """The axes this workload takes, as parameters (type, default, help, choices)."""
        out: list[Param] = []
        for name in AXES:
            if name not in self.axes:
                continue
            default = self.axis_defaults[name]
            if name == "strategy":
                out.append(Param(name, str, default, "parallel strategy", tuple(self.strategies)))
            elif name == "batch_size":
                out.append(Param(name, int, default, "micro-batch size per rank"))
            else:
                out.append(Param(name, int, default, "sequence length in tokens"))
        return tuple(out)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


# Parameters every workload accepts (the harness's own flags).
COMMON_PARAMS: tuple[Param, ...] = (
    Param("warmup", int, 5, "untimed warm-up iterations"),
    Param("iters", int, 20, "timed iterations"),
    Param("tag", str, "", "free-form label recorded with the results (e.g. 'after-driver-update')"),
)


# Timed steps past --iters until they last this long: a short timed region is at the mercy of
# one interrupt (workloads/harness/session.py, Session.time_steps).
MIN_TIME_PARAM = Param("min_time", float, 0.0,
                       "seconds the timed steps must add up to: more steps than --iters are timed "
                       "until they do (0: exactly --iters; at most 20,000 steps in all)")


WORKLOADS: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    """Add ``workload`` under its name; an empty name or a name already registered is refused
    (ValueError naming both entries): a second entry never silently replaces the first."""
    if not workload.name:
        raise ValueError(f"workload of module {workload.module!r}: registered with an empty name")
    existing = WORKLOADS.get(workload.name)
    if existing is not None and existing is not workload:
        raise ValueError(f"workload {workload.name!r} registered twice: {existing.module} and {workload.module}")
    WORKLOADS[workload.name] = workload
    return workload


register(
    Workload(
        name="gemm",
        module="workloads.gemm",
        summary="Dense matrix product C = A @ B (DeepBench GEMM shapes); TFLOP/s = 2*M*N*K / time.",
        params=COMMON_PARAMS
        + (
            Param("m", int, 1024, "M: rows of A and C", flag_name="size-m"),
            Param("n", int, 1024, "N: columns of B and C", flag_name="size-n"),
            Param("k", int, 1024, "K: columns of A, rows of B", flag_name="size-k"),
            MIN_TIME_PARAM,
        ),
        distributed=True,
        epilog=(
            "FLOPs per product 2*M*N*K. With several ranks each times its own product after a barrier;\n"
            "tflops is the sum over ranks. fp8 uses torch._scaled_mm (M, N, K multiples of 16).\n"
            "DeepBench shapes (M,N,K): 64,1760,1760  2560,64,2560  1760,128,1760  2560,2560,2560.\n"
            "Launched by torchrun, use the long flags (--size-m ...): torchrun reads --m as its own.\n"
            "example: python -m workloads.gemm --size-m 2560 --size-n 2560 --size-k 2560 --precision bf16 "
            "--output m.json"
        ),
    )
)


# --- DL primitives (DeepBench shapes; workloads/shapes.py) --------------------------------
from workloads import layouts as _layouts  # noqa: E402  (pure Python)
from workloads.models import configs as _gpt_configs  # noqa: E402
from workloads.models.configs import SIZES as _GPT_SIZES  # noqa: E402
from workloads.shapes import PRESET_NAMES as _PRESETS  # noqa: E402

_PRIMITIVE_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
_SHAPE = Param("shape", str, "deepbench-0", "DeepBench preset; explicit dimensions below override its values",
               _PRESETS)
_BACKWARD = Param("backward", bool, False, "also time the backward pass (separately from the forward)")


def _dim(name: str, help_text: str, sentinel: int = 0) -> Param:
    return Param(name, int, sentinel, f"{help_text} ({sentinel}: the preset's)")


def _primitive(name: str, summary: str, params: tuple[Param, ...], axis_defaults: dict[str, int],
               epilog: str) -> None:
    """A kernel of study C (workloads/<name>.py): one process, the primitives' precisions."""
    register(Workload(name=name, module=f"workloads.{name}", summary=summary, params=COMMON_PARAMS + params,
                      axis_defaults=axis_defaults, precisions=_PRIMITIVE_PRECISIONS, epilog=epilog))


_primitive("conv2d", "2-D convolution, DeepBench shapes; TFLOP/s from 2*Wo*Ho*k*c*fw*fh*b (forward).",
           (_SHAPE, _dim("width", "input width w"), _dim("height", "input height h"),
            _dim("channels", "input channels c"), _dim("filters", "filters k (output channels)"),
            _dim("filter_w", "filter width fw"), _dim("filter_h", "filter height fh"),
            _dim("pad_w", "padding pw", -1), _dim("pad_h", "padding ph", -1),
            Param("stride_w", int, 1, "stride sw"), Param("stride_h", int, 1, "stride sh"), _BACKWARD,
            Param("memory_format", str, "nchw", "tensor layout", ("nchw", "nhwc"))),
           {"batch_size": 0},
           "--batch-size 0 (default) takes the preset's batch b. Presets (w,h,c,b,k,fw,fh,pw,ph):\n"
           "  deepbench-0 7,7,32,131072,32,3,3,0,0     deepbench-1 14,14,128,4096,256,3,3,1,1\n"
           "  deepbench-2 54,54,16,256,1024,3,3,1,1    deepbench-3 128,128,32,1024,128,5,5,0,0\n"
           "FLOPs: forward 2*Wo*Ho*k*c*fw*fh*b, Wo=(w+2pw-fw)/sw+1; backward counted as 2 x forward.\n"
           "tflops_study_c: the same timings with study C's count, Wo=(w+2pw-fw)/sw (no +1).\n"
           "example: python -m workloads.conv2d --shape deepbench-1 --batch-size 64 --backward true")
_primitive("relu", "ReLU over a (b,c,h,w) tensor, DeepBench shapes; FLOPs w*h*c*b, and memory bandwidth.",
           (_SHAPE, _dim("width", "width w"), _dim("height", "height h"), _dim("channels", "channels c"), _BACKWARD),
           {"batch_size": 0},
           "--batch-size 0 (default) takes the preset's batch b. Presets (w,h,c,b):\n"
           "  deepbench-0 7,7,32,262144  deepbench-1 14,14,128,16384  deepbench-2 54,54,1024,128\n"
           "  deepbench-3 128,128,128,128\n"
           "FLOPs w*h*c*b forward, the same for backward; bandwidth_gbs = 2 x bytes of the tensor / time.")
_primitive("lstm", "LSTM layer(s) over a sequence, DeepBench shapes; FLOPs as the accelerator study counts them.",
           (_SHAPE, _dim("input_size", "input features i"), _dim("hidden_size", "hidden units h"),
            Param("layers", int, 1, "stacked LSTM layers"), _BACKWARD),
           {"batch_size": 0, "seq_len": 0},
           "--seq-len is the number of steps s and --batch-size the batch b; 0 takes the preset's.\n"
           "Presets (s,b,i,h): deepbench-0 50,64,256,256  deepbench-1 25,32,512,512\n"
           "  deepbench-2 25,16,512,512  deepbench-3 50,32,512,512\n"
           "tflops uses the study's 2*4*s*i*h*b + 2*4*s*h*b per layer; tflops_full counts\n"
           "2*4*s*b*h*(i+h) (the recurrent product in full). Backward counted as 2 x forward.")
_primitive("transformer_block",
           "One GPT layer (GPT-2 XL: hidden 1600, 25 heads); forward and backward timed separately.",
           (Param("hidden", int, 1600, "hidden size h"), Param("heads", int, 25, "attention heads"),
            Param("causal", bool, True, "causal attention mask"),
            Param("backward", bool, True, "also time the backward pass")),
           {"batch_size": 8, "seq_len": 1024},
           "FLOPs: forward b*s*(2*N_layer + 4*h*s), N_layer = 12h^2 + 13h (one layer's share of\n"
           "6N + 12*L*h*s, attention not halved for causality); backward 2 x forward.\n"
           "fp16/bf16 run under autocast (fp32 weights), as in mixed-precision training.\n"
           "example: python -m workloads.transformer_block --batch-size 16 --precision bf16")

_LM_STRATEGIES = ("ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3")

# What a strategy needs of the job's PyTorch beyond the workloads' own: (the oldest torch that has
# the API it calls, that API). `orch plan` checks it against the torch a site profile declares
# (python_env.torch) and skips the run with this reason (issue 53: Baskerville's PyTorch/2.1.2
# module has no torch.distributed.fsdp.fully_shard, public from 2.6: pytorch#141868).
STRATEGY_NEEDS_TORCH: dict[str, tuple[str, str]] = {
    "fsdp-full": ("2.6", "torch.distributed.fsdp.fully_shard (FSDP2)"),
    "fsdp-grad-op": ("2.6", "torch.distributed.fsdp.fully_shard (FSDP2)"),
}


def _lm_params(default_model: str) -> tuple[Param, ...]:
    return (
        Param("model", str, default_model, "model size (workloads/models/configs.py)", tuple(_GPT_SIZES)),
        Param("grad_accum", int, 1, "micro-batches per optimiser step (gradient accumulation)"),
        Param("epochs", int, 0, "run by epochs over the data (0: run --warmup + --iters steps)"),
        Param("max_steps_per_epoch", int, 0, "cap on optimiser steps per epoch (0: the whole data)"),
        Param("lr", float, 3e-4, "AdamW learning rate"),
        Param("seed", int, 0, "seed of weights and data"),
        Param("compile", bool, False, "torch.compile the model (ddp/fsdp)"),
    )


def _lm_refusal(default_model: str) -> Callable[[dict[str, Any]], str | None]:
    """What workloads/gpt2.py and genslm.py refuse at start, checked at plan time."""

    def refusal(p: dict[str, Any]) -> str | None:
        cfg = _GPT_SIZES.get(str(p.get("model") or default_model))
        if cfg is None:
            return None  # the parameter's choices already name the sizes
        try:
            seq, block = int(p.get("seq_len") or 0), int(p.get("block_size") or 0)
        except (TypeError, ValueError):
            return None  # the sweep's types are checked before this; nothing to add
        if block > 0 and seq > block:
            return f"seq_len {seq} exceeds block_size {block} (the model has {block} positions)"
        try:
            _layouts.resolve(p, int(p.get("devices") or 1), n_layer=cfg.n_layer, n_head=cfg.n_head)
        except _layouts.LayoutError as exc:
            return str(exc)
        return None

    return refusal


_LM_EPILOG = (
    "Model FLOPs per token 6N + 12*L*h*s (N without the position embedding; attention not halved\n"
    "for causality); tflops = that x tokens/s over all ranks; mfu = tflops / (ranks x --peak-tflops).\n"
    "tokens/s = tokens of the timed steps / their summed time (timed_time_s); *_median at the median step.\n"
    "Strategies: ddp, fsdp-full (FULL_SHARD), fsdp-grad-op (SHARD_GRAD_OP), zero1/2/3 (DeepSpeed).\n"
    "By epochs, epoch_time_s is the 2nd epoch's time (the only one's if --epochs 1), averaged over ranks.\n"
)

register(
    Workload(
        name="gpt2",
        module="workloads.gpt2",
        summary="GPT-2 pre-training throughput (nanoGPT-style model): tokens/s, TFLOP/s, MFU, memory.",
        params=COMMON_PARAMS + _lm_params("gpt2") + (
            Param("data", str, "synthetic",
                  "synthetic | text (shipped 0.6 MiB corpus) | shakespeare (generated 4.4 MiB play text, study B's "
                  "size and 67-character alphabet) | file:/path (streamed; *.bin = uint16 ids) "
                  "| file:@corpus (the shipped corpus, streamed)"),
            Param("tokenizer", str, "auto", "auto (GPT-2 ids for *.bin, bytes otherwise) | byte | char (the "
                  "text's distinct characters; vocabulary = their number; text read whole)",
                  ("auto", "byte", "char")),
            Param("vocab_size", int, 0, "vocabulary (0: the text's characters with --tokenizer char, else GPT-2's "
                  "50257)"),
            Param("block_size", int, 0, "positions of the model, minGPT's block_size (0: 1024, or seq_len if "
                  "longer)"),
            Param("attention", str, "sdpa", "sdpa (torch's fused scaled_dot_product_attention) | manual "
                  "(minGPT's softmax(QK^T/sqrt(d)), s x s scores materialised)", _gpt_configs.ATTENTIONS),
            Param("dropout", float, 0.0, "dropout after embeddings, attention weights and residual branches "
                  "(minGPT's 0.1; 0: none)"),
            Param("tie_weights", bool, True, "output head tied to the token embedding (GPT-2); false: its own "
                  "matrix (minGPT)"),
            Param("sparsity", float, 0.0, "fraction of each transformer linear weight pruned by magnitude and "
                  "kept zero after every step (0: dense; ddp only; workloads/sparsity.py)"),
            Param("tp", int, 1, "tensor-parallel degree: Megatron-style column/row-parallel linears (torch "
                  "DTensor), vocabulary-parallel embedding, head and loss; divides the heads"),
            Param("pp", int, 1, "pipeline stages (torch.distributed.pipelining), blocks split evenly; "
                  "data-parallel degree dp = ranks / (tp x pp)"),
            Param("microbatches", int, 0, "pipeline micro-batches of --batch-size per step and replica (0: "
                  "--grad-accum if above 1, else --pp); without --pp it must be 0 or --grad-accum"),
            Param("pp_schedule", str, "1f1b", "pipeline schedule: 1f1b (Schedule1F1B, needs microbatches >= pp) "
                  "| gpipe (ScheduleGPipe)", ("1f1b", "gpipe")),
            Param("cp", int, 1, "context-parallel degree: each of cp ranks holds seq_len / cp tokens of every "
                  "sequence and all-gathers the keys and values (workloads/context.py); with ddp or FSDP, tp = pp = 1; "
                  "dp = ranks / cp"),
            Param("sequence_parallel", bool, False, "split activations along the sequence between the "
                  "tensor-parallel regions (LayerNorms, dropout, residual stream); needs --tp >= 2"),
            Param("activation_checkpointing", str, "none", "none | full (every block's forward recomputed in "
                  "the backward, only its input kept; any strategy)", ("none", "full")),
            Param("zero_grad", str, "none", "how the optimiser clears gradients between steps: none (freed, "
                  "torch >= 2.0's default) | zeros (zeroed in place and kept, torch 1.x's default: a 2022 "
                  "program's memory; not with DeepSpeed)", ("none", "zeros")),
            Param("optimizer_impl", str, "auto", "AdamW's implementation: auto (fused where the device has the "
                  "kernel) | fused | foreach (torch's GPU default, e.g. a Lightning program's) | for-loop",
                  ("auto", "fused", "foreach", "for-loop")),
            Param("ddp_single_device", bool, False, "ddp: wrap one rank in DistributedDataParallel too, as "
                  "Lightning does (default: one rank runs the plain model)"),
            Param("accum_grads", str, "unsharded", "FSDP gradient accumulation: unsharded (sync off until the "
                  "last micro-batch, full fp32 gradients kept) | sharded (reduce-scatter every micro-batch, "
                  "only the shard kept, as LLM Foundry and DeepSpeed)", ("unsharded", "sharded")),
            Param("fsdp_precision", str, "autocast", "FSDP with fp16/bf16: autocast (fp32 parameters gathered, "
                  "autocast compute) | pure (LLM Foundry's PURE: parameters gathered and computed in the half "
                  "precision, gradients reduced in fp32)", ("autocast", "pure")),
        ),
        axis_defaults={"batch_size": 8, "seq_len": 1024, "strategy": "ddp"},
        distributed=True,
        strategies=_LM_STRATEGIES,
        precisions=TRAINING_PRECISIONS,
        refusal=_lm_refusal("gpt2"),
        presets=_gpt_configs.preset_rows,
        epilog=_LM_EPILOG + (
            "Study B (lightning-GPT/minGPT): --data shakespeare --tokenizer char --block-size 128 --seq-len 128\n"
            "--attention manual --dropout 0.1 --tie-weights false; model_params_with_position is minGPT's count\n"
            "(85.21M gpt2, 302.51M gpt2-medium at vocabulary 67, block 128). The real file:\n"
            "--data file:/path/to/shakespeare_input.txt --tokenizer char.\n"
            "--sparsity S: magnitude pruning of the blocks' linear weights, masks re-applied after each step;\n"
            "dense kernels run them (no speed-up expected on GPUs); model FLOPs stay the dense count.\n"
            "Layouts (workloads/layouts.py): ranks = dp x cp x tp x pp, tp innermost; tokens per step =\n"
            "batch x seq x micro-batches x dp. --tp with ddp (gradients averaged over dp after the backward)\n"
            "or fsdp-full/fsdp-grad-op (FSDP2 over dp); --pp with ddp; ZeRO 1-3 refuse tp/pp/cp. --cp C: context\n"
            "parallel (C ranks share each sequence; dp = ranks / C; ddp or FSDP, no tp/pp). Metrics dp, tp, pp, cp,\n"
            "microbatches record the layout; loss is the last stage's with --pp, the group's mean with --cp.\n"
            "sizes: " + ", ".join(_GPT_SIZES) + "\n"
            "example: torchrun --nproc-per-node 4 -m workloads.gpt2 --model gpt2-medium --batch-size 16 "
            "--strategy fsdp-full --precision bf16\n"
            "example: torchrun --nproc-per-node 8 -m workloads.gpt2 --model gpt3-2.7b --tp 4 --pp 2 --microbatches 8 "
            "--sequence-parallel true --activation-checkpointing full --precision bf16"
        ),
    )
)

register(
    Workload(
        name="genslm",
        module="workloads.genslm",
        summary="GenSLM: GPT over codon-tokenised synthetic genomes (vocabulary 70, 3 bases per token).",
        params=COMMON_PARAMS + _lm_params("gpt2-xl") + (
            Param("num_sequences", int, 64, "genomes per epoch (generated deterministically from --seed)"),
        ),
        axis_defaults={"batch_size": 1, "seq_len": 1024, "strategy": "ddp"},
        distributed=True,
        strategies=_LM_STRATEGIES,
        precisions=TRAINING_PRECISIONS,
        refusal=_lm_refusal("gpt2-xl"),
        epilog=_LM_EPILOG + "The study's sequence lengths are 1024 and 10240 codons.",
    )
)

register(
    Workload(
        name="allreduce",
        module="workloads.allreduce",
        summary="All-reduce bandwidth over message sizes: algbw and busbw as nccl-tests define them.",
        params=COMMON_PARAMS + (
            Param("sizes", str, "1024,65536,1048576,16777216,64500000",
                  "comma-separated message sizes in elements (k/M/G suffixes allowed)"),
            Param("peak_link_gbs", float, 0.0, "link peak in GB/s for link_utilization (0: not reported)"),
            Param("check", bool, True, "verify the reduced values once per size"),
        ),
        distributed=True,
        precisions=("fp32", "fp16", "bf16"),
        epilog=(
            "algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests), time the mean over --iters.\n"
            "Headline bandwidth_gbs is busbw at the largest size. gloo on cpu, nccl on cuda, xccl/ccl on xpu.\n"
            "example: torchrun --nproc-per-node 8 -m workloads.allreduce --sizes 16777216"
        ),
    )
)

# --- The site probe (workloads/probe.py): what a campaign depends on, seen from a compute node ---
PROBE_MARKER = "probe-marker.txt"  # orch writes a token into this file of the run directory at submit

register(
    Workload(
        name="probe",
        module="workloads.probe",
        summary="What a campaign needs on a compute node: Python, torch, DeepSpeed, devices, an all-reduce, "
                "the run directory, modules.",
        params=COMMON_PARAMS + (
            Param("elements", int, 1 << 20, "all-reduce message size in float32 elements (default 4 MiB)"),
            Param("marker", str, PROBE_MARKER, "file of the run directory ($ORCH_RUN_DIR, else the working "
                  "directory) whose text is reported back: orch writes a random token into it at submit time"),
            Param("comm_timeout", int, 60, "seconds the ranks wait for each other to form the process group "
                  "(a healthy one forms in seconds; a rendezvous that cannot is the finding)"),
        ),
        distributed=True,
        epilog=(
            "Reports, instead of refusing, whatever is missing: torch or DeepSpeed that cannot be imported\n"
            "(exit 1), a device type that is not there, a process group that does not form. The all-reduce\n"
            "runs on the device's backend (gloo cpu, nccl cuda, xccl/ccl xpu, hccl hpu) with nccl-tests'\n"
            "figures (busbw_gbs = algbw_gbs x 2(n-1)/n). The report is the metrics file's \"probe\" section.\n"
            "example: torchrun --nproc-per-node 2 -m workloads.probe --device cpu --output probe.json"
        ),
    )
)


# --- Study C models (AI testbed): workloads/modelbench.py runs them ------------------------
from workloads.models import sizes as _sizes  # noqa: E402  (pure Python, like this module)

_MODE = Param("mode", str, "train", "train (forward, loss, backward, optimiser step; DDP over ranks) or "
              "inference (eval, inference_mode, weights in the precision's dtype; latency per batch)",
              ("train", "inference"))
_CHANNELS_LAST = Param("channels_last", bool, True, "images and convolution weights in NHWC (channels-last) layout")
_IMAGE_SIZE = Param("image_size", int, 0, "side of the square input image (0: the size's own)")
_MODEL_EPILOG = (
    "Synthetic data made once on the device; warm-up steps excluded; step times are the slowest rank's.\n"
    "samples_per_s over all ranks; tflops = forward FLOPs per sample x (3 training, 1 inference) x samples/s;\n"
    "inference adds latency_p50_s / latency_p90_s (one batch). FLOP formulas: workloads/flops.py.\n"
)


def _size(table: dict[str, Any], default: str) -> Param:
    return Param("size", str, default, "model size (workloads/models/sizes.py): " + ", ".join(table), tuple(table))


def _model(name: str, summary: str, params: tuple[Param, ...], axis_defaults: dict[str, int], epilog: str) -> None:
    """A study C model: its program is workloads/<name>.py (on workloads/modelbench.py), every rank a
    data-parallel replica, the sweep axes those given defaults, the epilog after _MODEL_EPILOG."""
    register(Workload(name=name, module=f"workloads.{name}", summary=summary, params=COMMON_PARAMS + params,
                      axis_defaults=axis_defaults, distributed=True,
                      precisions=TRAINING_PRECISIONS, epilog=_MODEL_EPILOG + epilog))


_model("unet", "U-Net segmentation (256x256, base 64, depth 4), training or inference; samples/s, TFLOP/s.",
       (_size(_sizes.UNET_SIZES, "full"), _MODE, _IMAGE_SIZE, _CHANNELS_LAST), {"batch_size": 8},
       "FLOPs: every 3x3/1x1 convolution and 2x2 transposed convolution, 2 per multiply-add\n"
       "(96.3 GFLOP per 256x256 image forward at size full).\n"
       "example: python -m workloads.unet --batch-size 16 --precision bf16")
_model("resnet50", "ResNet-50 image classification (224x224), training or inference; samples/s, latency, TFLOP/s.",
       (_size(_sizes.RESNET_SIZES, "full"), _MODE, _IMAGE_SIZE, _CHANNELS_LAST), {"batch_size": 64},
       "FLOPs: 8.18 GFLOP per 224x224 image forward (4.09 G multiply-adds), training 3x.\n"
       "example: python -m workloads.resnet50 --mode inference --batch-size 1 --precision fp16")
_model("bert", "BERT pre-training (masked LM + next sentence), BERT-Large by default; sequences/s, tokens/s.",
       (_size(_sizes.BERT_SIZES, "large"),
        Param("grad_accum", int, 1, "micro-batches per optimiser step (global batch = batch x this x ranks)"),
        Param("max_predictions", int, 20, "masked positions per sequence (BERT's recipe: 20 at sequence 128)")),
       {"batch_size": 32, "seq_len": 128},
       "FLOPs per sequence forward: L*s*(2*(12h^2+13h) + 4*h*s) + P*2*(h^2 + h*V) + 2*(h^2 + 2h),\n"
       "P masked positions (MLM head on those only); training 3x. The study's global batch 256:\n"
       "  torchrun --nproc-per-node 8 -m workloads.bert --batch-size 32 --grad-accum 1 --precision fp16")
_model("distilbert", "DistilBERT sequence-classification inference latency (batch 1, sequence 128 by default).",
       (_size(_sizes.DISTILBERT_SIZES, "full"),), {"batch_size": 1, "seq_len": 128},
       "FLOPs per sequence: L*s*(2*(12h^2+13h) + 4*h*s) + 2*(h^2 + h*labels).\n"
       "example: python -m workloads.distilbert --batch-size 1 --seq-len 128 --precision fp16 --iters 200")
_model("braggnn", "BraggNN: Bragg-peak centres from 11x11 patches (X-ray diffraction), training or inference.",
       (_size(_sizes.BRAGGNN_SIZES, "full"), _MODE), {"batch_size": 512},
       "FLOPs: 4.21 MFLOP per patch forward (convolutions, the non-local block's products, dense).\n"
       "The study's batches: 512, 1024, 2048.")
_model("candle_uno", "CANDLE Uno drug-response MLP (cell + drug feature sub-networks), training or inference.",
       (_size(_sizes.UNO_SIZES, "full"), _MODE,
        Param("drugs", int, 1, "drugs per sample: 1 (single-drug response) or 2 (drug pairs)", (1, 2))),
       {"batch_size": 32},
       "FLOPs: 2 per multiply-add of every linear layer (38.5 MFLOP per sample forward at size full).")

from workloads.models import llama_configs as _llama  # noqa: E402  (pure Python)

register(
    Workload(
        name="llm_inference",
        module="workloads.llm_inference",
        summary="LLM inference (study D.3): concurrent requests, prefill and decode with a KV cache; TTFT, TPOT, "
                "tokens/s, MBU.",
        params=COMMON_PARAMS + (
            Param("model", str, "tiny", "Llama-style decoder size (workloads/models/llama_configs.py)",
                  tuple(_llama.SIZES)),
            Param("concurrency", int, 1, "requests served together (concurrent users)"),
            Param("input_len", int, 128, "prompt tokens per request"),
            Param("output_len", int, 128, "generated tokens per request"),
            Param("backend", str, "builtin", "builtin (this program) | vllm (vLLM offline engine, dummy weights)",
                  ("builtin", "vllm")),
            Param("decode", str, "static", "static (gpt-fast's static KV cache: fixed shapes, compiled and, on "
                  "CUDA, replayed as a CUDA graph) | plain (the cache read up to the position, eager)",
                  ("static", "plain")),
            Param("compile", str, "auto", "torch.compile the static decode step: auto (on CUDA only) | true | "
                  "false", ("auto", "true", "false")),
            Param("compile_backend", str, "inductor", "torch.compile backend (inductor; aot_eager checks the "
                  "graph without generating code)", ("inductor", "aot_eager", "eager")),
            Param("peak_bandwidth_gbs", float, 0.0, "peak memory bandwidth of one device in GB/s for MBU "
                  "(0: MBU not reported; the inference view computes it from the site profile)"),
            Param("seed", int, 0, "seed of the random weights and prompts"),
        ),
        distributed=True,
        precisions=("fp32", "fp16", "bf16"),
        epilog=(
            "A step is one whole iteration: prefill of every prompt, then output_len - 1 decode steps.\n"
            "TTFT = prefill time (requests arrive together); TPOT = decode time / (output_len - 1);\n"
            "output_tokens_per_s = concurrency x output_len x iters / timed time; MBU = bytes read per decode\n"
            "step (weights + KV cache) / step time / (devices x peak bandwidth). Several ranks: tensor parallel.\n"
            "sizes: " + ", ".join(_llama.SIZES) + "\n"
            "example: python -m workloads.llm_inference --model small --concurrency 8 --input-len 128 "
            "--output-len 64 --precision bf16"
        ),
    )
)


# Pure Python: the serving backends, arrivals and SLO presets (workloads/serving/spec.py).
from workloads.serving import spec as _serving  # noqa: E402


def _serving_refusal(p: dict[str, Any]) -> str | None:
    """What workloads/llm_serving.py refuses at start, checked at plan time."""
    try:
        _serving.parse_slo(str(p.get("slo") or "none"))
    except ValueError as exc:
        return str(exc)
    if p.get("backend") == "endpoint" and not p.get("endpoint"):
        return "backend endpoint needs endpoint: URL (the running server's base URL)"
    if p.get("loadgen") == "guidellm" and any((p.get(f"{side}_dist") or "fixed") != "fixed"
                                               for side in ("input", "output")):
        return "loadgen guidellm takes fixed lengths only (input_dist and output_dist fixed)"
    arrival = p.get("arrival") or "poisson"
    try:
        if arrival != "concurrency" and not float(p.get("rate") or 0) > 0:
            return f"arrival {arrival} needs a positive rate (requests per second)"
        # The rest of what the program refuses at start (issue 53: these planned, then failed).
        if arrival == "concurrency" and int(p.get("concurrency", 1)) < 1:
            return "arrival concurrency needs concurrency of at least 1"
        if int(p.get("num_requests", 1)) < 1:
            return "num_requests must be positive"
        if p.get("server_tp") is not None and int(p["server_tp"]) < 1:
            return "server_tp must be at least 1"
    except (TypeError, ValueError):
        return None
    return _serving_lengths_refusal(p)


def _serving_lengths_refusal(p: dict[str, Any]) -> str | None:
    """Bad input/output length distributions, or lengths past the model's positions."""
    try:
        longest = sum(_serving.lengths_from(p, side).high for side in ("input", "output"))
    except ValueError as exc:
        return str(exc)
    size = _llama.SIZES.get(str(p.get("model") or "tiny"))
    if size is not None and longest > size.max_seq:
        return (f"the longest request ({longest} tokens: input and output at their largest) exceeds "
                f"{p.get('model') or 'tiny'}'s {size.max_seq} positions")
    return None


register(
    Workload(
        name="llm_serving",
        module="workloads.llm_serving",
        summary="LLM serving: an OpenAI-compatible server under Poisson/constant/closed-loop load; TTFT, ITL, TPOT, "
                "e2e percentiles, goodput under SLOs.",
        params=(
            Param("warmup", int, 2, "untimed requests sent one by one once the server is healthy"),
            Param("tag", str, "", "free-form label recorded with the results"),
            Param("backend", str, "builtin", "builtin (orch's CPU/any-device server) | transformers (Hugging Face's "
                  "transformers serve, continuous batching, on the CPU) | vllm (on hpu: Intel Gaudi's vLLM) | "
                  "sglang | tgi | endpoint (a server already running at --endpoint)", _serving.BACKENDS),
            Param("endpoint", str, "", "base URL of a running server (backend endpoint), e.g. http://node:8000"),
            Param("model", str, "tiny", "Llama-style size served with random weights "
                  "(workloads/models/llama_configs.py)", tuple(_llama.SIZES)),
            Param("arrival", str, "poisson", "poisson | constant (open loop at --rate) | concurrency (closed loop)",
                  _serving.ARRIVALS),
            Param("rate", float, 1.0, "requests per second (poisson, constant)"),
            Param("concurrency", int, 1, "clients each sending its next request when its last ends (concurrency)"),
            Param("num_requests", int, 32, "timed requests"),
            Param("input_len", int, 128, "prompt tokens per request (the mean of input_dist normal)"),
            Param("input_dist", str, "fixed", "prompt lengths: fixed (input_len) | uniform (input_min..input_max) | "
                  "normal (mean input_len, input_stdev, clipped to input_min..input_max)", _serving.LENGTH_DISTS),
            Param("input_min", int, 0, "shortest prompt (uniform; normal: default 1)"),
            Param("input_max", int, 0, "longest prompt (uniform; normal: default 2 x input_len - input_min)"),
            Param("input_stdev", float, 0.0, "standard deviation of the prompt lengths (normal)"),
            Param("output_len", int, 64, "generated tokens per request (ignore_eos; the mean of output_dist normal)"),
            Param("output_dist", str, "fixed", "output lengths: fixed | uniform | normal, as input_dist",
                  _serving.LENGTH_DISTS),
            Param("output_min", int, 0, "fewest generated tokens (uniform; normal: default 1)"),
            Param("output_max", int, 0, "most generated tokens (uniform; normal: default 2 x output_len - output_min)"),
            Param("output_stdev", float, 0.0, "standard deviation of the output lengths (normal)"),
            Param("slo", str, "mlperf-llama2-70b-server", "SLO for goodput: none | " + " | ".join(_serving.SLO_PRESETS)
                  + " | ttft=S,tpot=S"),
            Param("host", str, "127.0.0.1", "address the started server listens on"),
            Param("port", int, 0, "port of the started server (0: a free one)"),
            Param("health_timeout_s", float, 600.0, "seconds /health may take to answer 200 (failure: "
                  "server_unhealthy)"),
            Param("request_timeout_s", float, 600.0, "seconds one request may wait for its next bytes"),
            Param("server_tp", int, 1, "tensor-parallel size of the server (vllm, sglang, tgi --num-shard); "
                  "a plan passes the run's devices"),
            Param("server_args", str, "", "extra arguments appended to the server's command line"),
            Param("seed", int, 0, "seed of the weights, prompts and Poisson arrivals"),
            Param("loadgen", str, "orch", "orch (workloads/serving/loadgen.py) | guidellm (GuideLLM from its own "
                  "environment: workloads/serving/guidellm_run.py; fixed lengths)", _serving.LOADGENS),
        ),
        precisions=("fp32", "fp16", "bf16"),
        refusal=_serving_refusal,
        devices_param="server_tp",
        epilog=(
            "TTFT = send to first streamed chunk; ITL = gaps between chunks (pooled); TPOT per request =\n"
            "(e2e - TTFT) / (output tokens - 1); p50/p90/p99 with *_count samples. Rates over the duration\n"
            "(first send to last end). goodput_requests_per_s: requests within every SLO per second; slo_met:\n"
            "p99 TTFT and p99 TPOT within the SLO (MLPerf's test). Records: requests.jsonl beside --output.\n"
            "Lengths per request (seeded by --seed): input_dist/output_dist fixed, uniform (min..max) or normal\n"
            "(mean *_len, *_stdev, clipped to min..max), as GuideLLM's prompt_tokens_stdev/min/max and vllm bench\n"
            "serve's random range ratio; each request's lengths are in its record.\n"
            "Failure classes (serving_failure.json; exit 3/4/5): server_unhealthy, server_died, port_in_use.\n"
            "SLO presets: " + ", ".join(f"{k} (TTFT {v['ttft']:g} s, TPOT {v['tpot']:g} s)"
                                        for k, v in _serving.SLO_PRESETS.items()) + "\n"
            "example: python -m workloads.llm_serving --model tiny --arrival poisson --rate 4 --num-requests 16 "
            "--input-len 32 --output-len 8 --output m.json"
        ),
    )
)


def names() -> list[str]:
    """Every registered workload's name, sorted."""
    return sorted(WORKLOADS)


def get(name: str) -> Workload:
    """The workload called ``name``; KeyError names the known ones."""
    try:
        return WORKLOADS[name]
    except KeyError:
        import difflib  # only on a miss: a near one is named first

        close = difflib.get_close_matches(name, list(WORKLOADS), n=2, cutoff=0.6) if isinstance(name, str) else []
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        raise KeyError(f"unknown workload {name!r}{hint} (known: {', '.join(sorted(WORKLOADS))})") from None
