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
    # First-class sweep axes the program accepts besides devices and precision.
    axes: frozenset[str] = frozenset()
    distributed: bool = False
    strategies: tuple[str, ...] = ("none",)
    precisions: tuple[str, ...] = PRECISIONS
    # Bytes of device memory one rank needs for the given parameters (None: unknown).
    memory_bytes: Callable[[dict[str, Any]], int] | None = field(default=None, compare=False)
    # Default value of each axis in ``axes`` when run by hand (the sweep always passes them).
    axis_defaults: dict[str, Any] = field(default_factory=dict, compare=False)
    # Extra text for ``--help`` (formulas, presets, examples).
    epilog: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        unknown = set(self.axes) - set(AXES)
        if unknown:
            raise ValueError(f"workload {self.name}: unknown axes {sorted(unknown)} (known: {AXES})")
        missing = set(self.axes) - set(self.axis_defaults)
        if missing:
            raise ValueError(f"workload {self.name}: axes {sorted(missing)} have no default")

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


def _gemm_memory(p: dict[str, Any]) -> int:
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    return (m * k + k * n + m * n) * BYTES_PER_ELEMENT.get(str(p.get("precision", "fp32")), 4)


WORKLOADS: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
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
        ),
        distributed=True,
        memory_bytes=_gemm_memory,
        epilog=(
            "FLOPs per product 2*M*N*K. With several ranks each times its own product after a barrier;\n"
            "tflops is the sum over ranks. fp8 uses torch._scaled_mm (M, N, K multiples of 16).\n"
            "DeepBench shapes (M,N,K): 64,1760,1760  2560,64,2560  1760,128,1760  2560,2560,2560.\n"
            "Launched by torchrun, use the long flags (--size-m ...): torchrun reads --m as its own.\n"
            "example: python -m workloads.gemm --size-m 2560 --size-n 2560 --size-k 2560 --precision bf16 --output m.json"
        ),
    )
)


def get(name: str) -> Workload:
    """The workload called ``name``; KeyError names the known ones."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r} (known: {', '.join(sorted(WORKLOADS))})") from None
