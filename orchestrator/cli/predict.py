"""`orch predict` and `orch calibrate`: the time model's commands (orchestrator/predict/perfmodel/).
Registered on the main app by orchestrator/cli/app.py."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from orchestrator.cli.common import JsonOpt, SiteOpt, SweepOpt, orch_context
from orchestrator.cli.output import console, print_json, print_table


def _shape_opt(flag: str, what: str) -> Any:
    return typer.Option(flag, help=f"Custom shape: {what} (with all of --layers --hidden --heads --vocab --seq, "
                        "instead of --model).", show_default=False)


def predict(
    ctx: typer.Context,
    devices: Annotated[int, typer.Option("--devices", help="Devices in all (whole nodes past one node).")],
    site: Annotated[str, typer.Option("--site", help="Site profile (site or site:system).")],
    model: Annotated[Optional[str], typer.Option(
        "--model", help="A gpt2 workload preset (workloads/models/configs.py): tiny, gpt2, gpt2-medium, gpt2-large, "
        "gpt2-xl, gpt3-2.7b, mpt-7b, ...; or gpt3-175b, gpt3-1t, vit-base, vit-large, vit-huge, vit-22b (study E's "
        "shapes, cited in orchestrator/predict/model_shapes.py: the time model's alone, which the gpt2 workload "
        "cannot run).", show_default=False)] = None,
    layers: Annotated[Optional[int], _shape_opt("--layers", "transformer layers")] = None,
    hidden: Annotated[Optional[int], _shape_opt("--hidden", "hidden size, divisible by --heads")] = None,
    heads: Annotated[Optional[int], _shape_opt("--heads", "attention heads")] = None,
    vocab: Annotated[Optional[int], _shape_opt("--vocab", "vocabulary")] = None,
    seq_len: Annotated[Optional[int], typer.Option(
        "--seq-len", "--seq", help="Sequence length in tokens (default: 1024 for a gpt2 workload preset, "
        "2048 for gpt3-175b/1t, the patches + 1 at 224x224 for a vit-*; required with a custom shape).",
        show_default=False)] = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="Default: bf16 where the device has "
                                                     "it, else its first precision.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per device: the global batch is "
                                            "this x devices, the same for every layout.")] = 8,
    micro_batch: Annotated[Optional[int], typer.Option("--micro-batch", help="Sequences per micro-batch of a "
                                                       "model replica (default: --batch-size).")] = None,
    tokens: Annotated[Optional[str], typer.Option(
        "--tokens", help="Token budget to train (300e9, 3e11, 300B, 1T): each layout's time to train it "
        "(steps = tokens / (global batch x seq)) in days, device-hours, and cost where the site has a "
        "price.", show_default=False)] = None,
    runnable: Annotated[bool, typer.Option("--runnable", help="Only the layouts the gpt2 workload's "
                                           "parallelism runs (column runnable).")] = False,
    show_breakdown: Annotated[bool, typer.Option(
        "--breakdown", help="Table of each step's parts in seconds (compute, tensor/context/pipeline/data "
        "parallel collectives, bubble, optimizer, overhead); --json has them always.")] = False,
    top: Annotated[int, typer.Option("--top", help="Rows to print (0: all); --json prints all.")] = 25,
    what_if_nodes: Annotated[Optional[int], typer.Option(
        "--what-if-nodes", help="WHAT-IF: the site with this many nodes, past its profile's max_nodes (e.g. "
        "16,384 GPUs = 2048 nodes of 8); labelled WHAT-IF in the header and in --json's what_if.",
        show_default=False)] = None,
    nvlink_domain: Annotated[Optional[int], typer.Option(
        "--nvlink-domain", help="WHAT-IF: devices per NVLink/NVSwitch domain (e.g. 4, 8, 64) instead of the "
        "profile's network.fast_domain; labelled WHAT-IF in the header and in --json's what_if.",
        show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Best parallel layout for model M on N devices of site S: every layout ranked by predicted step time.

    Layouts: data parallel (dp; ZeRO stage 0-3, where FSDP full = 3 and grad-op = 2), tensor
    parallel (tp, Megatron 1D with sequence parallel, or 2D on an r x c grid), pipeline
    parallel (pp, 1F1B, bubble (p-1)/(m+p-1)), context parallel (cp) and full activation
    recompute; dp x tp x pp x cp = devices. Order: layouts that fit in the device's memory,
    of them first those the gpt2 workload's parallelism runs (column runnable; its own layout
    check decides, with the model's layers and heads), fastest first; layouts that do not fit
    come last, marked NO. Column gpt2: whether the gpt2 workload can measure the layout now (a
    runnable layout of one of its presets; below the table, the grid that runs the best one and
    why the others cannot; --json: gpt2_values / gpt2_refusal).

    The model: a gpt2 workload preset (--model), gpt3-175b or gpt3-1t (the time model's own
    presets: the gpt2 workload has no such model), or a custom shape (--layers --hidden --heads
    --vocab --seq, all of them). Those that are no gpt2 preset have no program to trace: their
    memory is the workload's formula (memory_from says so).

    The time model (orchestrator/predict/perfmodel/): each op of a transformer layer is a roofline (FLOPs at
    peak x matmul efficiency, bytes at bandwidth x memory efficiency, plus a launch cost);
    collectives are alpha-beta rings over a two-tier network (the site profile's `network`:
    NVLink/xGMI domain, then inter-node bandwidth per device). Overlap: data-parallel
    gradient reduction hides under the last backward but for one 25 MB bucket; ZeRO-1/2's
    parameter all-gather after the optimizer does not; ZeRO-3's gathers are prefetched;
    tensor-parallel, context-parallel and pipeline transfers are never hidden. Memory: what `orch plan`
    predicts for the gpt2 run of the layout (traced from the program where it can be, else the
    workload's formula), plus the device's fixed cost.
    Efficiency factors: per-device-type defaults, or those `orch calibrate` fitted. MFU uses
    6N + 12*L*h*s model FLOPs per token. Estimates to rank layouts, not promises.

    What-ifs (study E): --what-if-nodes N predicts past the profile's node cap, --nvlink-domain D
    with another NVLink domain size; either is labelled WHAT-IF (header, and --json's what_if,
    null without them). examples/E1-scaling-whatif.sh sweeps both.
    """
    from orchestrator.predict.campaign import parse_tokens
    from orchestrator.predict.ranking import predict as run_predict
    from orchestrator.predict.whatif import WhatIf

    c = orch_context(ctx)
    budget = None if tokens is None else parse_tokens(tokens)
    result = run_predict(model, devices, site, precision=precision, batch_size=batch_size, seq_len=seq_len,
                         micro_batch=micro_batch, shape={"layers": layers, "hidden": hidden, "heads": heads,
                                                         "vocab": vocab},
                         tokens=budget, runnable_only=runnable, sites_dirs=c.sites_dirs, state_dir=c.state_dir,
                         what_if=WhatIf(nodes=what_if_nodes, nvlink_domain=nvlink_domain))
    if as_json:
        print_json(result.as_json())
        return
    _print_table(result, top, show_breakdown)


def _print_table(result: Any, top: int, show_breakdown: bool) -> None:
    """The header, the ranked layouts (or their step breakdown), and the footer of `orch predict`."""
    from orchestrator.predict.perfmodel.transformer import BREAKDOWN
    from orchestrator.predict.ranking import COLUMNS, TRAIN_COLUMNS, footer, header

    for line in header(result):
        console.print(line, markup=False, highlight=False)
    if show_breakdown:
        rows = result.breakdown_rows()
        columns = ["rank", "layout", "step s", *(f"{part} s" for part in BREAKDOWN)]
    else:
        rows = result.rows()
        train = TRAIN_COLUMNS if result.tokens is not None else []
        columns = [{"step_s": "step s", "tokens_per_s": "tokens/s", "memory_gb": "GB/device", "fits": "fits?",
                    "mfu": "MFU", "train_days": "days", "device_hours": "device-h",
                    "cost": f"cost {result.price[1]}" if result.price else "cost"}.get(col, col)
                   for col in [*COLUMNS, *train]]
    shown = rows if top <= 0 else rows[:top]
    print_table(columns, shown, title=f"{result.model} on {result.devices} devices of {result.machine.name}")
    if len(shown) < len(rows):
        console.print(f"... {len(rows) - len(shown)} more layout(s): --top 0 for all", markup=False)
    for line in footer(result, len(shown)):
        console.print(line, markup=False, highlight=False)


def calibrate(
    ctx: typer.Context,
    sweep: SweepOpt = None,
    site: SiteOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Fit and print; store nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fit the time model's efficiency factors (matmul, memory, network fractions of the datasheet,
    launch cost per op, fixed cost per step) to the measured step times of completed runs, per
    site and device.

    Stored in .orch/calibration.yaml; `orch predict` and `orch plan` use them from then on for
    that site's device. A fit of n runs frees at most n - 1 factors (matmul first, then the step
    and op overheads, memory, network), each pulled towards its default; a single run is refused.
    Prints the mean step-time error (|predicted - measured| / measured) of the runs before and
    after the fit, and the leave-one-out error (each run predicted by a fit on the others).
    [bold]--site[/bold] takes a site or site:system.
    """
    from orchestrator.predict.calibrate import COLUMNS
    from orchestrator.predict.calibrate import calibrate as run_calibrate

    c = orch_context(ctx)
    fitted = run_calibrate(c.engine, sweep=sweep, site=site, sites_dirs=c.sites_dirs, state_dir=c.state_dir,
                           dry_run=dry_run)
    rows = [f.row() for f in fitted]
    if as_json:
        print_json([{**dict(zip(COLUMNS, row)), "stored": str(f.stored) if f.stored else None}
                    for row, f in zip(rows, fitted)])
        return
    print_table(COLUMNS, rows, title="efficiency factors fitted to measured step times")
    stored = {str(f.stored) for f in fitted if f.stored}
    console.print(f"stored in {', '.join(sorted(stored))}" if stored else "dry run: nothing stored",
                  markup=False, highlight=False)
