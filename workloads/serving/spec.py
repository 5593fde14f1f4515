"""What a serving run may be asked for: backends, arrivals, SLO presets, failure exit codes.

Pure Python and import-free, like workloads/registry.py, which reads it: ``orch plan`` checks a
sweep's serving values against it on login nodes without torch.
"""

from __future__ import annotations

import math

BACKENDS = ("builtin", "vllm", "sglang", "endpoint")
ARRIVALS = ("poisson", "constant", "concurrency")

# failure class -> exit code of the workload (2 stays a refusal: workloads/harness/errors.py).
EXIT_CODES: dict[str, int] = {"server_unhealthy": 3, "server_died": 4, "port_in_use": 5}

# MLPerf Inference (v4.0 onwards), Llama-2-70B: the server scenario's TTFT p99 and TPOT p99
# limits, and the interactive scenario's.
SLO_PRESETS: dict[str, dict[str, float]] = {
    "mlperf-llama2-70b-server": {"ttft": 2.0, "tpot": 0.2},
    "mlperf-llama2-70b-interactive": {"ttft": 0.45, "tpot": 0.04},
}


def parse_slo(text: str) -> dict[str, float]:
    """``none``, a preset's name or ``ttft=S,tpot=S`` -> {"ttft": s, "tpot": s} (keys optional)."""
    text = (text or "none").strip()
    if text == "none":
        return {}
    if text in SLO_PRESETS:
        return dict(SLO_PRESETS[text])
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ("ttft", "tpot"):
            raise ValueError(f"slo {text!r}: expected none, {', '.join(SLO_PRESETS)} or ttft=S,tpot=S")
        try:
            out[key] = float(value)
        except ValueError:
            raise ValueError(f"slo {text!r}: {key}={value!r} is not a number of seconds") from None
        if not (out[key] > 0 and math.isfinite(out[key])):
            raise ValueError(f"slo {text!r}: {key} must be a positive number of seconds")
    return out
