"""GuideLLM (vLLM project's load generator) as llm_serving's ``--loadgen guidellm`` (stdlib only).

GuideLLM runs as its own program from its own environment (``$ORCH_GUIDELLM``, else
``.venv-guidellm/bin/guidellm`` of this checkout, made by scripts/setup_serving.sh): its many
dependencies (datasets, pandas, sanic, transformers ...) stay off the workload's Python, and a
run that does not choose it never touches them. This module builds its command line (GuideLLM
0.8's ``guidellm run`` with ``kind=...`` arguments) and turns its JSON report's per-request
statistics into orch's records (workloads/serving/loadgen.py Record), so the ``serving`` rows and
``requests.jsonl`` are the same as with orch's own generator.

Where GuideLLM's records differ from orch's (their definitions, not a loss in the parse):
- it keeps the first and last token times of a request, not every chunk's: the record's
  ``chunk_s`` holds those two and ``chunks`` says ``first_last``; its ITL is the request's mean,
  (last - first) / (tokens - 1), which workloads/serving/figures.py uses for such records;
- prompts are its synthetic text (``synthetic_text``: words cut to ``prompt_tokens`` by the
  model's tokenizer), output lengths its ``output_tokens`` with ``ignore_eos``;
- its clock starts at its own first request; the duration is first start to last end, as orch's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from workloads.serving.loadgen import Record

__all__ = ["command", "executable", "parse"]

# orch's arrivals as GuideLLM's profiles.
_PROFILES = {"poisson": "poisson", "constant": "constant", "concurrency": "concurrent"}


def executable() -> str:
    return os.environ.get("ORCH_GUIDELLM") or str(Path(__file__).resolve().parents[2] / ".venv-guidellm" / "bin"
                                                  / "guidellm")


def command(*, base_url: str, model: str, arrival: str, rate: float, concurrency: int, num_requests: int,
            input_len: int, output_len: int, seed: int, output_path: Path) -> list[str]:
    """``guidellm run`` for one load level: ``num_requests`` streamed completions of fixed lengths."""
    load = f"streams={concurrency}" if arrival == "concurrency" else f"rate={rate:g}"
    profile = f"kind={_PROFILES[arrival]},{load}"  # its profiles take no seed: its arrivals are its own draw
    return [executable(), "run",
            "--backend", f"kind=openai_http,target={base_url},model={model},request_format=/v1/completions",
            "--profile", profile,
            "--constraint", f"kind=max_requests,count={num_requests}",
            "--data", f"kind=synthetic_text,prompt_tokens={input_len},output_tokens={output_len}",
            "--seed", f"kind=static,value={seed}", "--output", f"kind=json,path={output_path}",
            "--disable-console-interactive"]


def parse(path: Path) -> tuple[list[Record], float, str]:
    """The records, duration (s) and GuideLLM version of the report at ``path`` (one benchmark)."""
    report: dict[str, Any] = json.loads(path.read_text())
    (benchmark,) = report["benchmarks"]
    requests = benchmark["requests"]
    done = [(r, True) for r in requests["successful"]] + [(r, False) for r in requests["errored"]]
    starts = [float(r["info"]["timings"]["request_start"]) for r, _ in done if r["info"]["timings"]["request_start"]]
    ends = [float(r["info"]["timings"]["request_end"]) for r, _ in done if r["info"]["timings"]["request_end"]]
    zero = min(starts) if starts else 0.0
    records = []
    for index, (stats, ok) in enumerate(sorted(done, key=lambda d: d[0]["info"]["timings"]["request_start"] or 0)):
        timings = stats["info"]["timings"]
        sent = float(timings["request_start"] or zero)
        chunks = [float(timings[k]) - sent for k in ("first_token_iteration", "last_token_iteration")
                  if timings.get(k) is not None]
        output_tokens = int(stats["output_metrics"].get("text_tokens") or 0)
        record = Record(index=index, scheduled_s=sent - zero, sent_s=sent - zero,
                        input_tokens=int(stats["input_metrics"].get("text_tokens") or 0),
                        output_len=output_tokens, ok=ok and bool(chunks),
                        latency_s=float(timings["request_end"]) - sent if timings.get("request_end") else None,
                        chunk_s=chunks[:1] if output_tokens < 2 else chunks, output_tokens=output_tokens,
                        error=None if ok else str(stats["info"].get("error")), chunks="first_last")
        records.append(record)
    duration = max(ends) - zero if ends else 0.0
    return records, duration, str(report["metadata"].get("guidellm_version", "?"))
