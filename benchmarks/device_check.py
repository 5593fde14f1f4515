"""The device check (issue 26): one command that, on one GPU, measures through orch itself what
the memory and time models predict, and what the device's energy counter says.

    python benchmarks/device_check.py                 # on the one-GPU machine (site gpu-box)
    python benchmarks/device_check.py --tiny          # the same flow on CPU, tiny shapes (CI)
    scripts/device_check.sh                           # installs the carried wheels first, then this

Through orch, not around it: a sweep file is written, ``orch plan`` predicts every run's peak
memory and step time, ``orch run`` runs them on the ``gpu-box`` profile (``local`` with --tiny)
into a SQLite database, then ``orch calibrate``, the ``prediction_error`` view and ``orch report``.
Everything lands in one folder (``device-check-out/<UTC time>/`` or ``--out DIR``):

    orch.db           the database (runs, metrics, every metric in metric_values)
    sweep.yaml        what ran;  plan.json  what the plan predicted (and why a run was skipped)
    summary.md        measured peak memory beside the plan's, measured step beside the time model's,
                      the headline figures and energy per result, one row per run
    prediction_error.json, calibrate.txt, report.html, orch-run.txt   the commands' own outputs
    state/            orch's run directories (job.sh, stdout.log, stderr.log, metrics.json)

What runs (GPU; ``--tiny`` runs the same experiments at the sizes in TINY), the questions of issue
50 first, so that a check cut short by ``--timeout`` has answered them:
- gpt2 training, bf16, batch 8 x 1024, ddp: eager at gpt2, gpt2-medium and gpt2-xl, and compiled
  (``compile: true``) at gpt2-medium and gpt2-xl: the compiled and eager pairs, MFU beside the peak;
- llm_inference, Llama-2-7B shape (random weights), bf16, 512 tokens in, 64 out: the plain eager
  decoder at concurrency 1, and the static-KV-cache decoder (compiled, a CUDA graph) at 1, 8, 64:
  MBU beside the bandwidth;
- gpt2-xl under every strategy (fsdp-full, fsdp-grad-op, zero1, zero2, zero3), and ddp, fsdp-full
  and zero2 with activation checkpointing: the sharded step against the time model (its predictions
  made before the run: benchmarks/RESULTS.md, benchmarks/sharding_cost.py);
- gemm 8192^3 in bf16 and fp8 (fp32, tf32 and fp16 repeated within 2% on two H200s: no longer run),
  conv2d (DeepBench shape 1, bf16, forward + backward) and the transformer block (GPT-2 XL's, bf16);
- the reference loop: the check's bf16 GEMM timed by a bare ``torch.matmul`` loop in the check's own
  process beside the same GEMM through the harness (``benchmarks/bench_harness_overhead.py``).

Each figure is printed beside its physical limit: TFLOP/s and MFU beside the device's dense peak for
the precision, decode bandwidth and MBU beside the device's peak bandwidth.

Budget: on the lent H200 the first round's 18 runs took 237-268 s (2026-11-27/28). This round has 21
runs, five of which compile (tens of seconds each, untimed but on the clock): about 7-8 minutes,
designed, not yet measured. ``--timeout`` (default 420 s for orch run) cancels what is left so the
whole check ends inside 8 minutes whatever happens; the order above puts what the issue asks first.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SWEEP = "device-check"


@dataclass(frozen=True)
class Sizes:
    """The shapes of one mode of the check: the GPU's real ones, or tiny ones for a CPU."""

    site: str
    walltime: str
    gemm: int
    gemm_precisions: list[str]
    conv: dict[str, Any]
    block: dict[str, Any]
    gpt2_sizes: list[str]  # ddp size sweep, smallest first; the strategies run at gpt2_model
    gpt2_model: str
    compiled: list[str]  # the sizes run compiled too (the compiled and eager pairs)
    strategies: list[str]  # the sharded strategies run at gpt2_model (ddp is in the size sweep)
    gpt2: dict[str, Any]
    llm: dict[str, Any]
    concurrency: list[int]
    share: bool  # runs may share the machine (CPU smoke test) or run alone (timings on the GPU)
    extra: dict[str, Any] = field(default_factory=dict)


GPU = Sizes(
    site="gpu-box", walltime="00:10:00", gemm=8192, gemm_precisions=["bf16", "fp8"],
    # 200 steps: 20 took 0.07 s on the H200, too short for NVML's energy counter (workloads/harness/energy.py).
    conv={"shape": "deepbench-1", "precision": "bf16", "backward": True, "warmup": 5, "iters": 200},
    block={"precision": "bf16", "batch_size": 8, "seq_len": 1024, "warmup": 5, "iters": 200},
    gpt2_sizes=["gpt2", "gpt2-medium", "gpt2-xl"], gpt2_model="gpt2-xl", compiled=["gpt2-medium", "gpt2-xl"],
    strategies=["fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3"],
    gpt2={"precision": "bf16", "batch_size": 8, "seq_len": 1024, "warmup": 3, "iters": 10},
    llm={"model": "llama2-7b", "precision": "bf16", "input_len": 512, "output_len": 64, "warmup": 1, "iters": 3},
    concurrency=[1, 8, 64], share=False,
)
TINY = Sizes(
    site="local", walltime="00:05:00", gemm=64, gemm_precisions=["fp32", "tf32", "bf16", "fp16", "fp8"],
    conv={"shape": "deepbench-1", "precision": "fp32", "backward": True, "batch_size": 1, "width": 8, "height": 8,
          "channels": 4, "filters": 8, "warmup": 1, "iters": 3},
    block={"precision": "fp32", "hidden": 32, "heads": 2, "batch_size": 1, "seq_len": 16, "warmup": 1, "iters": 3},
    # No compiled pair on a CPU: inductor's C++ build takes minutes here (tests/workloads compare
    # compiled and eager losses and tokens instead).
    gpt2_sizes=["tiny", "gpt-micro"], gpt2_model="tiny", compiled=[], strategies=["fsdp-full", "zero2"],
    gpt2={"precision": "fp32", "batch_size": 2, "seq_len": 32, "vocab_size": 256, "warmup": 1, "iters": 2},
    llm={"model": "tiny", "precision": "fp32", "input_len": 16, "output_len": 4, "warmup": 1, "iters": 2},
    concurrency=[1, 4], share=True,
)
CHECKPOINTED = ["ddp", "fsdp-full", "zero2"]  # DDP, FSDP FULL_SHARD, DeepSpeed ZeRO stage 2, with checkpointing
# The workloads every check must leave in the database (the e2e test asserts them).
WORKLOADS = ("gemm", "conv2d", "transformer_block", "gpt2", "llm_inference")


def sweep_document(sizes: Sizes, site: str) -> dict[str, Any]:
    """The sweep file of the check: one experiment per question it answers."""

    def experiment(name: str, workload: str, grid: dict[str, Any]) -> dict[str, Any]:
        exp: dict[str, Any] = {"name": name, "workload": workload, "sites": [site], "walltime": sizes.walltime,
                               "grid": {"devices": 1, **grid}}
        if sizes.share:
            exp["share"] = True
        return exp

    n = sizes.gemm
    experiments = [
        experiment("gpt2-sizes", "gpt2", {**sizes.gpt2, "model": sizes.gpt2_sizes, "strategy": "ddp",
                                          "activation_checkpointing": "none"}),
        experiment("decode-plain", "llm_inference", {**sizes.llm, "concurrency": sizes.concurrency[0],
                                                     "decode": "plain"}),
        experiment("decode-static", "llm_inference", {**sizes.llm, "concurrency": sizes.concurrency,
                                                      "decode": "static"}),
        experiment("gpt2-strategies", "gpt2", {**sizes.gpt2, "model": sizes.gpt2_model, "strategy": sizes.strategies,
                                               "activation_checkpointing": "none"}),
        experiment("gpt2-checkpointing", "gpt2", {**sizes.gpt2, "model": sizes.gpt2_model, "strategy": CHECKPOINTED,
                                                  "activation_checkpointing": "full"}),
        experiment("gemm", "gemm", {"precision": sizes.gemm_precisions, "m": n, "n": n, "k": n,
                                    "warmup": 3, "iters": 10, "min_time": 0.5 if not sizes.share else 0.0}),
        experiment("conv", "conv2d", dict(sizes.conv)),
        experiment("block", "transformer_block", dict(sizes.block)),
    ]
    if sizes.compiled:
        experiments.insert(1, experiment("gpt2-compiled", "gpt2", {**sizes.gpt2, "model": sizes.compiled,
                                                                   "strategy": "ddp", "compile": True,
                                                                   "activation_checkpointing": "none"}))
    return {"name": SWEEP, "experiments": experiments}


# --- running orch -------------------------------------------------------------------------

class Orch:
    """``python -m orchestrator.cli`` with the check's database and state folder."""

    def __init__(self, out: Path, extra_env: dict[str, str] | None = None) -> None:
        self.out = out
        self.env = {k: v for k, v in os.environ.items() if k not in ("ORCH_DB_URL", "ORCH_HOME")}
        self.env.update({"ORCH_DB_URL": f"sqlite:///{out / 'orch.db'}", "ORCH_HOME": str(out / "state"),
                         "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
                         "COLUMNS": "200"})
        self.env.update(extra_env or {})

    def __call__(self, *args: str, timeout: float = 600, save: str | None = None) -> subprocess.CompletedProcess[str]:
        began = time.monotonic()
        cmd = [sys.executable, "-m", "orchestrator.cli", *args]
        try:
            proc = subprocess.run(cmd, cwd=self.out, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            proc = subprocess.CompletedProcess(cmd, 124, out, f"orch {args[0]}: stopped after {timeout:.0f} s\n")
        log(f"orch {' '.join(args[:2])}: exit {proc.returncode} in {time.monotonic() - began:.1f} s")
        if save:
            (self.out / save).write_text(proc.stdout + (f"\n--- stderr\n{proc.stderr}" if proc.stderr else ""))
        return proc

    def sql(self, query: str) -> list[dict[str, Any]]:
        proc = self("sql", "--format", "json", query)
        if proc.returncode != 0:
            raise RuntimeError(f"orch sql failed: {proc.stderr.strip()}")
        rows = json.loads(proc.stdout or "[]")
        return rows if isinstance(rows, list) else []


def log(message: str) -> None:
    print(f"[device-check] {message}", file=sys.stderr, flush=True)


# --- the summary --------------------------------------------------------------------------

SUMMARY_QUERY = """
SELECT rr.run_id, rr.experiment, rr.workload, rr.precision, rr.strategy, rr.params, rr.status, rr.failure_class,
       rr.device_model, rr.tflops, rr.tokens_per_s, rr.peak_mem_gb, rr.step_time_p50_s,
       pe.predicted_peak_gb, pe.measured_peak_gb, pe.memory_error, pe.predicted_step_s, pe.measured_step_s,
       pe.step_error, m.raw, r.peak_tflops, r.peak_bandwidth_gbs
FROM results rr
LEFT JOIN runs r ON r.id = rr.run_id
LEFT JOIN prediction_error pe ON pe.run_id = rr.run_id AND pe.attempt = rr.attempt
LEFT JOIN attempts a ON a.run_id = rr.run_id AND a.number = rr.attempt
LEFT JOIN metrics m ON m.attempt_id = a.id
WHERE rr.sweep = '{sweep}'
ORDER BY rr.experiment, rr.workload, rr.precision, rr.run_id
"""
SKIPPED_QUERY = "SELECT id AS run_id, experiment, workload, precision, skip_reason FROM runs " \
                "WHERE sweep = '{sweep}' AND status = 'skipped' ORDER BY experiment, precision"


def fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):+.0f}%"


def config_of(row: dict[str, Any]) -> str:
    params = json.loads(row.get("params") or "{}")
    wanted = {"gemm": ("m",), "conv2d": ("shape",), "transformer_block": ("hidden",),
              "gpt2": ("model", "activation_checkpointing"), "llm_inference": ("model", "concurrency", "decode")}
    parts = [f"{params[k]}" for k in wanted.get(row["workload"], ()) if k in params]
    if row.get("strategy") and row["workload"] == "gpt2":
        parts.insert(1, str(row["strategy"]))
    if params.get("compile") in (True, "true"):
        parts.append("compiled")
    return " ".join(parts).replace(" none", "").replace(" full", " +ckpt")


def limit_of(row: dict[str, Any], metrics: dict[str, Any]) -> tuple[str, str]:
    """(the physical limit the figure is held to, the fraction of it reached): the device's dense
    peak for the precision and MFU; for decoding, its peak memory bandwidth and MBU."""
    if row["workload"] == "llm_inference":
        bandwidth = row.get("peak_bandwidth_gbs")
        return (f"{fmt(bandwidth)} GB/s" if bandwidth else "-"), fmt(metrics.get("mbu"), 2)
    peak = row.get("peak_tflops")
    return (f"{fmt(peak)} TFLOP/s" if peak else "-"), fmt(metrics.get("mfu"), 2)


def headline(row: dict[str, Any], metrics: dict[str, Any]) -> str:
    if row["workload"] == "llm_inference":
        return (f"TTFT {fmt(metrics.get('ttft_p50_s'))} s, TPOT {fmt(metrics.get('tpot_s'))} s, "
                f"{fmt(metrics.get('output_tokens_per_s'))} tok/s, MBU {fmt(metrics.get('mbu'), 2)}")
    if row["workload"] == "gpt2":
        return f"{fmt(row.get('tokens_per_s'))} tok/s, MFU {fmt(metrics.get('mfu'), 2)}"
    return f"{fmt(row.get('tflops'))} TFLOP/s, MFU {fmt(metrics.get('mfu'), 2)}"


def summary_rows(orch: Orch) -> list[dict[str, Any]]:
    rows = orch.sql(SUMMARY_QUERY.format(sweep=SWEEP))
    for row in rows:
        raw = json.loads(row.pop("raw") or "{}")
        row["metrics"] = raw.get("metrics") or {}
        row["energy_source"] = (raw.get("energy") or {}).get("source", "none")
        row["config"] = config_of(row)
    return rows


def summary_markdown(rows: list[dict[str, Any]], skipped: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Device check, {meta['date']}", "",
             f"- command: `{meta['command']}`", f"- device: {meta['device']} (site `{meta['site']}`)",
             f"- wall time: {meta['wall_s']:.0f} s; runs completed {meta['completed']}, failed {meta['failed']}, "
             f"skipped at plan time {len(skipped)}", "",
             "Memory: the plan's predicted per-device peak of tensors (`runs.predicted_peak_gb`) beside the measured "
             "peak (`peak_tensor_bytes` on CPU, else `max_memory_allocated`; reserved beside it). Time: the time "
             "model's step (`runs.predicted_step_s`) beside the measured median step. Energy from the device's own "
             "counter (source), `-` where it has none. On a CPU only gpt2 reports tensor bytes: the other workloads' "
             "measured figure is the process's max RSS, so their memory error says nothing of the model.", "",
             "| experiment | workload | config | precision | status | mem pred GB | mem meas GB | reserved GB "
             "| mem err | step pred s | step meas s | step err | figures | limit | of limit | J/step | W | tok/J "
             "| energy source |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        m = row["metrics"]
        status = row["status"] if row["status"] == "completed" else f"{row['status']} ({row['failure_class']})"
        lines.append(" | ".join([
            f"| {row['experiment']}", row["workload"], row["config"], row["precision"], status,
            fmt(row["predicted_peak_gb"]), fmt(row["measured_peak_gb"] if row["measured_peak_gb"] is not None
                                               else row["peak_mem_gb"]),
            fmt(m.get("peak_reserved_gb")), pct(row["memory_error"]), fmt(row["predicted_step_s"]),
            fmt(row["measured_step_s"] if row["measured_step_s"] is not None else row["step_time_p50_s"]),
            pct(row["step_error"]), headline(row, m), *limit_of(row, m), fmt(m.get("energy_per_step_j")),
            fmt(m.get("avg_power_w")),
            fmt(m.get("tokens_per_j")), f"{row['energy_source']} |"]))
    reference = meta.get("reference")
    if reference:
        lines += ["", f"Reference loop ({reference['what']}): a bare `torch.matmul` loop "
                  f"{reference['per_step_us']:.1f} us a step, {reference['bare_tflops']:.3g} TFLOP/s; through the "
                  f"harness, as the gemm runs time it, {reference['paired_ratio']:.3f}x the bare loop's time "
                  "(benchmarks/bench_harness_overhead.py; the median of paired rounds)."]
    if skipped:
        lines += ["", "Skipped at plan time:", ""]
        lines += [f"- {s['experiment']} {s['workload']} {s['precision']}: {s['skip_reason']}" for s in skipped]
    return "\n".join(lines) + "\n"


# --- the check ----------------------------------------------------------------------------

def device_name(tiny: bool) -> str:
    if tiny:
        from workloads.harness.device import cpu_model

        return f"CPU ({cpu_model()})"
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("device check: no CUDA device here (torch.cuda.is_available() is False); "
                         "--tiny runs the same flow on the CPU")
    return str(torch.cuda.get_device_name(0))


def site_for(device: str, tiny: bool, chosen: str | None) -> str:
    if chosen:
        return chosen
    if tiny:
        return TINY.site
    return "gpu-box:h200" if "H200" in device.upper() else "gpu-box:h100"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="device_check", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="the same flow on CPU with tiny shapes (site local)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default device-check-out/<UTC time>/)")
    parser.add_argument("--site", default=None, help="site[:system] to run on (default: gpu-box:h100 or :h200 "
                        "by the device's name; local with --tiny)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds orch run may take before what is left is cancelled (default 420; 270 --tiny)")
    args = parser.parse_args(argv)
    began = time.monotonic()
    sizes = TINY if args.tiny else GPU
    device = device_name(args.tiny)
    site = site_for(device, args.tiny, args.site)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = (args.out or REPO / "device-check-out" / stamp).resolve()
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"device check: {out} is not empty; name a new folder with --out")
    out.mkdir(parents=True, exist_ok=True)
    log(f"{device}, site {site}, output in {out}")

    sweep = out / "sweep.yaml"
    sweep.write_text(yaml.safe_dump(sweep_document(sizes, site), sort_keys=False))
    orch = Orch(out)
    plan = orch("plan", "--json", str(sweep), timeout=300, save="plan.json")
    if plan.returncode != 0:
        log(f"orch plan failed:\n{plan.stderr}")
        return 2
    timeout = args.timeout or (270.0 if args.tiny else 420.0)
    run = orch("run", str(sweep), "--interval", "1", timeout=timeout, save="orch-run.txt")
    if run.returncode == 124:  # local jobs outlive orch run: stop what is left
        orch("cancel", "--sweep", SWEEP, save="orch-cancel.txt")
    orch("status", timeout=120)  # collects what finished meanwhile
    calibrate = orch("calibrate", "--sweep", SWEEP, timeout=120, save="calibrate.txt")
    errors = orch("sql", "--format", "json", "SELECT * FROM prediction_error", save="prediction_error.json")
    orch("report", "--sweep", SWEEP, "-o", str(out / "report.html"), timeout=300, save="report.txt")

    rows = summary_rows(orch)
    skipped = orch.sql(SKIPPED_QUERY.format(sweep=SWEEP))
    reference = reference_loop(sizes, args.tiny)
    meta = {"date": stamp, "command": " ".join(["python", "benchmarks/device_check.py", *(argv or sys.argv[1:])]),
            "device": device, "site": site, "wall_s": time.monotonic() - began,
            "completed": sum(r["status"] == "completed" for r in rows),
            "failed": sum(r["status"] != "completed" for r in rows), "reference": reference}
    text = summary_markdown(rows, skipped, meta)
    (out / "summary.md").write_text(text)
    print(text)
    print("--- orch calibrate\n" + (calibrate.stdout or calibrate.stderr))
    print("--- prediction_error\n" + _table(errors.stdout))
    log(f"done in {time.monotonic() - began:.0f} s: {out / 'summary.md'}")
    missing = sorted(set(WORKLOADS) - {r["workload"] for r in rows if r["status"] == "completed"})
    if missing:
        log(f"no completed run of: {', '.join(missing)} (see {out / 'orch-run.txt'} and state/runs/)")
        return 1
    return 0 if run.returncode == 0 else 1


def reference_loop(sizes: Sizes, tiny: bool) -> dict[str, Any] | None:
    """The check's GEMM (bf16 on the GPU, fp32 tiny) timed by a bare loop and through the harness in
    this process, after every run has ended (nothing else on the device)."""
    from benchmarks.bench_harness_overhead import measure

    device, precision, n = ("cpu", "fp32", sizes.gemm) if tiny else ("cuda", "bf16", sizes.gemm)
    try:
        figures = measure(n, iters=20, rounds=3, device=device, precision=precision)
    except Exception as exc:  # noqa: BLE001  # the check's other figures stand without it
        log(f"reference loop failed: {exc}")
        return None
    return {**figures, "what": f"{n}^3 {precision} on {device}",
            "bare_tflops": 2 * n**3 / (figures["per_step_us"] * 1e-6) / 1e12}


def _table(text: str) -> str:
    """The prediction_error rows, the columns that matter, one line each."""
    try:
        rows = json.loads(text or "[]")
    except json.JSONDecodeError:
        return text
    keys = ("experiment", "workload", "precision", "strategy", "predicted_peak_gb", "measured_peak_gb",
            "memory_error", "predicted_step_s", "measured_step_s", "step_error")
    return "\n".join(["  ".join(keys)] + ["  ".join(fmt(r.get(k)) for k in keys) for r in rows])


if __name__ == "__main__":
    if str(REPO) not in sys.path:  # run as a script: the checkout's packages first
        sys.path.insert(0, str(REPO))
    raise SystemExit(main())
