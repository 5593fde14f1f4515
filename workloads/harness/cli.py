"""Command line of a workload, built from its registry entry.

The registry is the single source of truth for parameter names, types and
defaults: the orchestrator validates sweeps against it and the workload parses
its command line from it, so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from workloads.registry import COMMON_PARAMS, DEVICES, Param, Workload

TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
FALSE_WORDS = frozenset({"false", "0", "no", "off"})


def parse_bool(text: str | bool) -> bool:
    """``true``/``false`` (the orchestrator's spelling) and the usual synonyms."""
    if isinstance(text, bool):
        return text
    word = str(text).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _add_param(parser: argparse.ArgumentParser | argparse._ArgumentGroup, param: Param) -> None:
    kwargs: dict[str, Any] = {"default": param.default, "dest": param.name}
    help_text = param.help
    if param.type is bool:
        kwargs["type"] = parse_bool
        kwargs["metavar"] = "{true,false}"
    else:
        kwargs["type"] = param.type
        if param.choices is not None:
            kwargs["choices"] = param.choices
    if param.default is not None:
        shown = str(param.default).lower() if isinstance(param.default, bool) else param.default
        help_text += f" (default: {shown})"
    kwargs["help"] = help_text
    flags = [param.flag]
    plain = "--" + param.name.replace("_", "-")
    if plain != param.flag:
        flags.append(plain)  # the short spelling, safe by hand (not after a launcher)
    parser.add_argument(*flags, **kwargs)


def build_parser(workload: Workload) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {workload.module}",
        description=workload.summary,
        epilog=workload.epilog or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # Exact flags only: a sweep's recorded command line must mean one thing.
        allow_abbrev=False,
    )
    own = parser.add_argument_group("workload parameters")
    common = parser.add_argument_group("harness (every workload)")
    common_names = {p.name for p in COMMON_PARAMS}
    for param in workload.params:
        _add_param(common if param.name in common_names else own, param)
    for param in workload.axis_params():
        _add_param(own, param)
    if "strategy" not in workload.axes:
        # A sweep may still name the one strategy such a workload has ("none").
        own.add_argument("--strategy", default=workload.strategies[0], choices=workload.strategies,
                         help=argparse.SUPPRESS)

    common.add_argument(
        "--precision",
        default="fp32",
        choices=workload.precisions,
        help="numeric precision; refused with exit code 2 where the device lacks it (default: fp32)",
    )
    common.add_argument(
        "--output",
        default=None,
        metavar="PATH",
        help="metrics JSON (schema orch.metrics/1) written atomically by rank 0; "
        "without it only a summary is printed",
    )
    common.add_argument(
        "--device",
        default="auto",
        choices=DEVICES,
        help="device type; auto picks cuda (NVIDIA or ROCm), then xpu, then hpu, then cpu",
    )
    common.add_argument(
        "--peak-tflops",
        dest="peak_tflops",
        type=float,
        default=None,
        metavar="F",
        help="peak TFLOP/s of one device at this precision; gives MFU (null without it)",
    )
    # The deepspeed launcher (and the old torch.distributed.launch) append --local_rank=N.
    parser.add_argument("--local-rank", "--local_rank", dest="local_rank", type=int, default=None,
                        help=argparse.SUPPRESS)
    return parser


def parse_args(workload: Workload, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = build_parser(workload)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]  # a launcher's "--" separator that reached us
    args = parser.parse_args(argv)
    local_rank = vars(args).pop("local_rank")  # a launcher detail, not a parameter of the run
    if local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(local_rank))
    for param in list(workload.params) + list(workload.axis_params()):
        value = getattr(args, param.name)
        if param.choices is not None and value not in param.choices and value is not None:
            parser.error(f"{param.flag}: {value!r} is not one of {list(param.choices)}")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        parser.error("--peak-tflops must be positive")
    for name in ("warmup", "iters"):
        if hasattr(args, name) and getattr(args, name) < (0 if name == "warmup" else 1):
            parser.error(f"--{name} must be >= {0 if name == 'warmup' else 1}")
    return args
