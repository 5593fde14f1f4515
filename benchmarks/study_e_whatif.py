"""Study E's figure shapes (NERSC talk, performance modelling for science foundation models) from
`orch predict --json`: the time model's best layout per point, as CSV and as PNG figures.

Three figures, each one row per point of ``study_e.csv`` (column ``figure``):

- ``scaling``: GPT-3 175B, GPT-3 1T and ViT-22B on A100 (dgx:a100_80), H200 and B200, from
  512 to 16,384 GPUs; tokens/s (samples/s for the ViT: tokens / patches) of the best layout that
  fits. Past a profile's node cap the point is a what-if (``--what-if-nodes``, column what_if).
- ``nvlink``: the same models on 4,096 B200s with NVLink domains of 4, 8 and 64 devices
  (``--nvlink-domain``): step time of the best layout.
- ``parallelism``: the best layout's tp, pp, dp and cp at each GPU count of ``scaling`` (the
  talk's optimal-parallelism study), from the same rows.
- ``tp_sweep`` / ``pp_sweep``: the talk's sweeps around the optimum (study-setups.yaml 004-M12):
  GPT-3 1T on 16,384 B200s, NVLink domain 8, micro-batch 1; tensor-parallel degrees at pipeline
  64, and pipeline degrees at tensor-parallel 8, each the best layout with that degree.

Run: ``python benchmarks/study_e_whatif.py --out study-e/`` (or ``examples/E1-scaling-whatif.sh``);
``--quick`` takes two GPU counts and one model (the test's size). Every number is the time
model's (orchestrator/predict/perfmodel/), not a measurement.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

MODELS = ("gpt3-175b", "gpt3-1t", "vit-22b")
SYSTEMS = {"A100": "dgx:a100_80", "H200": "dgx:h200", "B200": "dgx:b200"}
GPUS = (512, 1024, 2048, 4096, 8192, 16384)
DOMAINS = (4, 8, 64)
DOMAIN_GPUS = 4096
PER_NODE = 8  # every dgx system: 8 GPUs a node
BATCH = 1  # sequences per GPU: global batch = GPUs (e.g. 4M tokens at 4096 GPUs and seq 2048)
# The talk's TP and PP sweeps (004-M12): one point count, one model, NVLink domain 8.
SWEEP_MODEL, SWEEP_GPUS, SWEEP_DOMAIN = "gpt3-1t", 16384, 8
SWEEPS = (("tp_sweep", "pp", 64, "tp"), ("pp_sweep", "tp", 8, "pp"))  # figure, fixed degree, its value, swept
COLUMNS = ["figure", "model", "system", "site", "gpus", "nvlink_domain", "what_if", "layout", "dp", "tp", "pp", "cp",
           "zero", "recompute", "step_s", "tokens_per_s", "samples_per_s", "mfu", "memory_gb", "fits"]


def orch_command() -> list[str]:
    found = shutil.which("orch")
    return [found] if found else [sys.executable, "-m", "orchestrator.cli"]


def predict(orch: list[str], model: str, site: str, gpus: int, domain: int | None) -> dict[str, Any]:
    """`orch predict --json` of one point; past the profile's node cap (orch says so, naming
    --what-if-nodes), again as a what-if of just enough nodes."""
    args = [*orch, "predict", "--model", model, "--site", site, "--devices", str(gpus), "--batch-size", str(BATCH),
            "--json"]
    if domain is not None:
        args += ["--nvlink-domain", str(domain)]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0 and "--what-if-nodes" in proc.stderr:
        args += ["--what-if-nodes", str(-(-gpus // PER_NODE))]
        proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def row(figure: str, system: str, out: dict[str, Any], domain: int | None,
        layout: dict[str, Any] | None = None) -> dict[str, Any]:
    best = layout or next((r for r in out["layouts"] if r["fits"] == "yes"), out["layouts"][0])
    what_if = out["what_if"] or {}  # null: the site as profiled
    beyond = bool(what_if.get("nodes") and what_if["nodes"] > what_if["profile_max_nodes"]) or (
        domain is not None and domain != what_if.get("profile_nvlink_domain"))
    return {"figure": figure, "model": out["model"], "system": system, "site": out["site"], "gpus": out["devices"],
            "nvlink_domain": (what_if.get("nvlink_domain") or what_if.get("profile_nvlink_domain")),
            "what_if": "yes" if beyond else "no", "layout": best["layout"],
            **{k: best[k] for k in ("dp", "tp", "pp", "cp", "zero", "recompute", "step_s", "tokens_per_s", "mfu",
                                    "memory_gb", "fits")},
            "samples_per_s": best["tokens_per_s"] / out["seq_len"]}


def collect(orch: list[str], models: tuple[str, ...], gpus: tuple[int, ...], domains: tuple[int, ...],
            domain_gpus: int) -> list[dict[str, Any]]:
    rows = []
    for model in models:
        for system, site in SYSTEMS.items():
            rows += [row("scaling", system, predict(orch, model, site, n, None), None) for n in gpus]
        rows += [row("nvlink", "B200", predict(orch, model, SYSTEMS["B200"], domain_gpus, d), d) for d in domains]
    rows += [{**r, "figure": "parallelism"} for r in rows if r["figure"] == "scaling"]
    return rows


def sweeps(orch: list[str]) -> list[dict[str, Any]]:
    """The TP sweep at a fixed pipeline degree and the PP sweep at a fixed tensor-parallel degree:
    the layouts come ranked (fitting first, then fastest), so the first with each swept degree is
    that degree's best."""
    out = predict(orch, SWEEP_MODEL, SYSTEMS["B200"], SWEEP_GPUS, SWEEP_DOMAIN)
    rows = []
    for figure, fixed, value, swept in SWEEPS:
        seen: set[int] = set()
        for layout in out["layouts"]:
            if layout[fixed] == value and layout[swept] not in seen:
                seen.add(layout[swept])
                rows.append(row(figure, "B200", out, SWEEP_DOMAIN, layout))
    return sorted(rows, key=lambda r: (r["figure"], r["tp"], r["pp"]))


def draw(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    models = sorted({r["model"] for r in rows})
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models):
        for system in SYSTEMS:
            points = sorted((r["gpus"], r["tokens_per_s"]) for r in rows if r["figure"] == "scaling"
                            and r["model"] == model and r["system"] == system)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=system)
        ax.set(title=model, xlabel="GPUs", ylabel="tokens/s (predicted)", xscale="log", yscale="log")
        ax.legend()
    files.append(out / "scaling.png")
    fig.savefig(files[-1], dpi=120, bbox_inches="tight")
    fig, ax = plt.subplots(figsize=(6, 4))
    for model in models:
        points = sorted((r["nvlink_domain"], r["step_s"]) for r in rows if r["figure"] == "nvlink"
                        and r["model"] == model)
        ax.plot([str(p[0]) for p in points], [p[1] for p in points], marker="o", label=model)
    ax.set(title="B200: NVLink domain size (what-if)", xlabel="NVLink domain (GPUs)", ylabel="step s (predicted)")
    ax.legend()
    files.append(out / "nvlink.png")
    fig.savefig(files[-1], dpi=120, bbox_inches="tight")
    plt.close("all")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("study-e"), help="folder for study_e.csv and the PNGs")
    parser.add_argument("--quick", action="store_true", help="one model, two GPU counts, two domains")
    parser.add_argument("--no-figures", action="store_true", help="the CSV only")
    args = parser.parse_args(argv)
    if args.quick:
        rows = collect(orch_command(), ("gpt3-175b",), (64, 16384), (8, 64), 1024)
    else:
        rows = collect(orch_command(), MODELS, GPUS, DOMAINS, DOMAIN_GPUS) + sweeps(orch_command())
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "study_e.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    files = [] if args.no_figures else draw(rows, args.out)
    print(f"{len(rows)} rows: {args.out / 'study_e.csv'}" + "".join(f"\n{f}" for f in files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
