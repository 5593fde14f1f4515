"""Precision names -> what PyTorch must do, and refusal where the device lacks it.

- fp32: float32 with TF32 tensor-core paths switched off, so fp32 means fp32.
- tf32: float32 tensors, matrix products on TF32 units (NVIDIA Ampere+, Intel
  Max, Gaudi; AMD MI300 "xf32"). Refused on CPU, where it would silently be fp32.
- fp16: float16; training runs under autocast with a GradScaler (fp16's narrow
  range underflows small gradients without loss scaling).
- bf16: bfloat16; training under autocast, no scaler needed (fp32's range).
- fp8: e4m3 inputs to a scaled matrix product (``torch._scaled_mm``) on NVIDIA
  compute capability >= 8.9 and AMD MI300/MI350; refused elsewhere. Training
  workloads do not offer fp8 (see the registry).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ContextManager

import torch

from workloads.harness.device import Device
from workloads.harness.errors import Refused


@dataclass(frozen=True)
class Precision:
    name: str
    # dtype of the tensors of a primitive (GEMM, conv, ...) benchmark.
    dtype: torch.dtype
    # dtype autocast runs a training model in (None: plain fp32 weights and maths).
    autocast_dtype: torch.dtype | None
    use_grad_scaler: bool
    tf32: bool

    def autocast(self, device: Device) -> ContextManager[Any]:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def grad_scaler(self, device: Device) -> "torch.amp.GradScaler | None":
        if not self.use_grad_scaler:
            return None
        return torch.amp.GradScaler(device.type)


def _rocm_arch(device: Device) -> str:
    try:
        return str(torch.cuda.get_device_properties(device.torch_device).gcnArchName)
    except Exception:
        return ""


def supports_tf32(device: Device) -> bool:
    if device.type == "cuda":
        if device.is_rocm:
            return _rocm_arch(device).startswith(("gfx94", "gfx95"))
        return torch.cuda.get_device_capability(device.torch_device) >= (8, 0)
    return device.type in ("xpu", "hpu")


def fp8_support(device: Device) -> str | None:
    """None when fp8 GEMMs work here, else why not (one line)."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"this PyTorch ({torch.__version__}) has no float8 matrix product"
    if device.type == "cuda":
        if device.is_rocm:
            arch = _rocm_arch(device)
            if arch.startswith(("gfx94", "gfx95")):
                return None
            return f"fp8 needs an AMD MI300/MI350 (gfx94x/gfx95x); this device is {arch or device.model}"
        cap = torch.cuda.get_device_capability(device.torch_device)
        if cap >= (8, 9):
            return None
        return f"fp8 needs NVIDIA compute capability >= 8.9 (Ada/Hopper); {device.model} is {cap[0]}.{cap[1]}"
    return f"fp8 is not supported on {device.type} ({device.model}) by this workload"


def fp8_dtype(device: Device) -> torch.dtype:
    # MI300 (gfx94x) implements the "fnuz" variant of e4m3.
    if device.is_rocm and _rocm_arch(device).startswith("gfx94"):
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def set_tf32(enabled: bool) -> None:
    # "highest" keeps fp32 matmuls in fp32; "high" lets them use TF32 (or bf16x3 on some CPUs,
    # which is why tf32 is refused on CPU rather than requested).
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def resolve(name: str, device: Device, *, training: bool = False) -> Precision:
    """The plan for precision ``name`` on ``device``; :class:`Refused` if the device lacks it."""
    if name == "fp32":
        plan = Precision("fp32", torch.float32, None, False, False)
    elif name == "tf32":
        if not supports_tf32(device):
            raise Refused(f"tf32 needs tensor-core TF32 units (NVIDIA Ampere+, Intel Max, Gaudi); "
                          f"{device.type} ({device.model}) has none")
        plan = Precision("tf32", torch.float32, None, False, True)
    elif name == "fp16":
        plan = Precision("fp16", torch.float16, torch.float16 if training else None, training, False)
    elif name == "bf16":
        if device.type == "cuda" and not device.is_rocm and not torch.cuda.is_bf16_supported():
            raise Refused(f"bf16 needs NVIDIA compute capability >= 8.0; {device.model} lacks it")
        plan = Precision("bf16", torch.bfloat16, torch.bfloat16 if training else None, False, False)
    elif name == "fp8":
        if training:
            raise Refused("fp8 training is not implemented by these plain-PyTorch workloads")
        reason = fp8_support(device)
        if reason is not None:
            raise Refused(reason)
        plan = Precision("fp8", fp8_dtype(device), None, False, False)
    else:
        raise Refused(f"unknown precision {name!r} (known: fp32, tf32, fp16, bf16, fp8)")
    set_tf32(plan.tf32)
    return plan
