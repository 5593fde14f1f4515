"""Agreement of orch's load generator and GuideLLM on the same server (issue 49).

One ``transformers serve`` (continuous batching, the tiny Llama on the CPU; workloads/serving/
hf_server.py) is started once and warmed up; then, at the same Poisson rate and the same fixed
lengths, orch's generator (workloads/serving/loadgen.py) and GuideLLM 0.8 (from .venv-guidellm:
workloads/serving/guidellm_run.py) each send ``--requests`` streamed completions, in turn, twice
each (A B A B, so a drift of the shared machine shows). Each pass's records go through the same
figures (workloads/serving/figures.py): TTFT p50/p90, ITL p50, TPOT p50 and output tokens/s,
printed side by side with the relative difference of the two tools' mean over their passes.

Where the definitions differ (not errors of either tool):
- ITL: orch pools every gap between chunks; GuideLLM keeps only the first and last token's times,
  so its ITL is the request's mean gap (one per request). Medians of the two agree only when the
  gaps within a request are even.
- Prompts: orch sends words of random ids; GuideLLM's synthetic text cut to the same token count
  by the served tokenizer. Both are the same number of tokens (checked per record).
- Warm-up: the server is warmed before both (orch's untimed requests); GuideLLM adds none of its own here.
- Duration (the denominator of tokens/s): first send to last end for both.

    .venv/bin/python benchmarks/serving_agreement.py --rate 4 --requests 24
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from workloads.models.llama_configs import SIZES
from workloads.serving import figures, guidellm_run, launch, loadgen

FIGURES = ("ttft_p50_s", "ttft_p90_s", "itl_p50_s", "tpot_p50_s", "output_tokens_per_s")


def orch_pass(url: str, model: str, rate: float, count: int, input_len: int, output_len: int,
              seed: int) -> tuple[list[dict[str, Any]], float]:
    prompts = loadgen.prompts([input_len] * count, SIZES["tiny"].vocab_size, seed)
    result = loadgen.run_load(url + "/v1/completions", model=model, arrival="poisson", rate=rate, concurrency=1,
                              prompt_ids=prompts, output_len=output_len, seed=seed, style="text")
    return [dataclasses.asdict(r) for r in result.records], result.duration_s


def guidellm_pass(url: str, model: str, rate: float, count: int, input_len: int, output_len: int, seed: int,
                  folder: Path) -> tuple[list[dict[str, Any]], float]:
    report = folder / f"guidellm-{seed}.json"
    argv = guidellm_run.command(base_url=url, model=model, arrival="poisson", rate=rate, concurrency=1,
                                num_requests=count, input_len=input_len, output_len=output_len, seed=seed,
                                output_path=report)
    with open(folder / "guidellm.log", "ab") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    records, duration, _ = guidellm_run.parse(report)
    return [dataclasses.asdict(r) for r in records], duration


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=16)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="serving-agreement-"))
    model_dir = launch.write_model_dir(launch.llama_config(dataclasses.asdict(SIZES["tiny"]), "float32"))
    port = launch.free_port()
    argv = launch.server_command("transformers", host="127.0.0.1", port=port, model="tiny", model_dir=model_dir,
                                 tp=1, dtype="float32", max_len=512, seed=0)
    server = launch.start(argv, host="127.0.0.1", port=port, log_path=folder / "server.log")
    try:
        launch.wait_healthy(server, server.base_url + "/health", 300)
        # Warm-up: the first requests build the continuous-batching cache (tens of seconds).
        orch_pass(server.base_url, model_dir, args.rate, 4, args.input_len, args.output_len, 99)
        passes: dict[str, list[dict[str, Any]]] = {"orch": [], "guidellm": []}
        for seed in (1, 2):
            for tool, run in (("orch", orch_pass), ("guidellm", None)):
                if run is not None:
                    records, duration = run(server.base_url, model_dir, args.rate, args.requests, args.input_len,
                                            args.output_len, seed)
                else:
                    records, duration = guidellm_pass(server.base_url, model_dir, args.rate, args.requests,
                                                      args.input_len, args.output_len, seed, folder)
                assert all(r["ok"] and r["output_tokens"] == args.output_len for r in records), records
                passes[tool].append(figures.compute(records, duration, {}))
    finally:
        server.stop()
    print(f"transformers serve (continuous batching), tiny Llama on the CPU; Poisson {args.rate:g}/s, "
          f"{args.requests} requests per pass, {args.input_len} in / {args.output_len} out tokens")
    print(f"{'figure':22}" + "".join(f"{t + ' ' + str(i + 1):>14}" for t in passes for i in range(2)) + f"{'diff':>9}")
    out: dict[str, Any] = {}
    for name in FIGURES:
        values = {t: [p[name] for p in passes[t]] for t in passes}
        mean = {t: sum(v) / len(v) for t, v in values.items()}
        diff = (mean["guidellm"] - mean["orch"]) / mean["orch"]
        out[name] = {**values, "diff": diff}
        scale = 1 if name.endswith("per_s") else 1000  # latencies in ms, rates as they are
        label = name + (" (ms)" if scale == 1000 else "")
        print(f"{label:22}" + "".join(f"{v * scale:14.2f}" for t in passes for v in values[t]) + f"{diff:+9.1%}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
