"""`orch predict` and `orch calibrate`: the time model's commands (orchestrator/predict/perfmodel/).
Registered on the main app by orchestrator/cli/app.py."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from orchestrator.cli.output import console, print_json, print_table

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts instead of a table.")]


def _context(ctx: typer.Context) -> Any:
    return ctx.find_root().obj  # orch's Context, set by the main app's callback


def predict(
    ctx: typer.Context,
    model: Annotated[str, typer.Option("--model", help="gpt2 preset (workloads/models/configs.py): tiny, gpt2, "
                                       "gpt2-medium, gpt2-large, gpt2-xl, gpt3-2.7b, ...")],
    devices: Annotated[int, typer.Option("--devices", help="Devices in all (whole nodes past one node).")],
    site: Annotated[str, typer.Option("--site", help="Site profile (site or site:system).")],
    precision: Annotated[Optional[str], typer.Option("--precision", help="Default: bf16 where the device has "
                                                     "it, else its first precision.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per device: the global batch is "
                                            "this x devices, the same for every layout.")] = 8,
    seq_len: Annotated[int, typer.Option("--seq-len", help="Sequence length in tokens.")] = 1024,
    micro_batch: Annotated[Optional[int], typer.Option("--micro-batch", help="Sequences per micro-batch of a "
                                                       "model replica (default: --batch-size).")] = None,
    top: Annotated[int, typer.Option("--top", help="Rows to print (0: all); --json prints all.")] = 25,
    as_json: JsonOpt = False,
) -> None:
    """Best parallel layout for model M on N devices of site S: every layout ranked by predicted step time.

    Layouts: data parallel (dp; ZeRO stage 0-3, where FSDP full = 3 and grad-op = 2), tensor
    parallel (tp, Megatron 1D with sequence parallel, or 2D on an r x c grid), pipeline
    parallel (pp, 1F1B, bubble (p-1)/(m+p-1)), context parallel (cp) and full activation
    recompute; dp x tp x pp x cp = devices. Layouts that do not fit in the device's memory come
    last, marked NO. Column gpt2: whether the gpt2 workload can run the layout, so that the
    prediction can be measured (its own layout check decides; below the table, the grid that
    runs the best one and why the others cannot; --json: gpt2_values / gpt2_refusal).

    The model (orchestrator/predict/perfmodel/): each op of a transformer layer is a roofline (FLOPs at
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
    """
    from orchestrator.predict.ranking import COLUMNS, footer, header
    from orchestrator.predict.ranking import predict as run_predict

    c = _context(ctx)
    result = run_predict(model, devices, site, precision=precision, batch_size=batch_size, seq_len=seq_len,
                         micro_batch=micro_batch, sites_dirs=c.sites_dirs, state_dir=c.state_dir)
    if as_json:
        print_json(result.as_json())
        return
    for line in header(result):
        console.print(line, markup=False, highlight=False)
    rows = result.rows()
    shown = rows if top <= 0 else rows[:top]
    columns = [{"step_s": "step s", "tokens_per_s": "tokens/s", "memory_gb": "GB/device", "fits": "fits?",
                "mfu": "MFU"}.get(col, col) for col in COLUMNS]
    print_table(columns, shown, title=f"{model} on {devices} devices of {result.machine.name}")
    if len(shown) < len(rows):
        console.print(f"... {len(rows) - len(shown)} more layout(s): --top 0 for all", markup=False)
    for line in footer(result, len(shown)):
        console.print(line, markup=False, highlight=False)


def calibrate(
    ctx: typer.Context,
    sweep: Annotated[Optional[str], typer.Option("--sweep", help="Only the runs of this sweep.")] = None,
    site: Annotated[Optional[str], typer.Option("--site", help="Only the runs of this site (or site:system).")] = None,
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
    """
    from orchestrator.predict.calibrate import COLUMNS
    from orchestrator.predict.calibrate import calibrate as run_calibrate

    c = _context(ctx)
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
