"""What a serving run may be asked for: backends, arrivals, SLO presets, failure exit codes.

Pure Python and import-free, like workloads/registry.py, which reads it: ``orch plan`` checks a
sweep's serving values against it on login nodes without torch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

BACKENDS = ("builtin", "transformers", "vllm", "sglang", "tgi", "endpoint")

# How a backend's server wants its completion requests: ``token_ids`` (prompts as lists of ids,
# ``ignore_eos``/``min_tokens`` for exact output lengths: vLLM, SGLang, orch's own) or ``text``
# (prompts as words, one token each, and no fields beyond OpenAI's: ``transformers serve``
# refuses unknown fields; its model has no end-of-sequence token, so max_tokens is exact).
REQUEST_STYLES: dict[str, str] = {"transformers": "text"}
ARRIVALS = ("poisson", "constant", "concurrency")
LOADGENS = ("orch", "guidellm")  # whose load generator drives the server (workloads/serving/guidellm_run.py)

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


# Request length distributions, as the field's tools draw them: GuideLLM's synthetic data
# (prompt_tokens with prompt_tokens_stdev/min/max, output_tokens likewise) and ``vllm bench serve
# --dataset-name random`` (--random-input-len/--random-output-len with --random-range-ratio: uniform
# in [len x (1 - r), len x (1 + r)]).
LENGTH_DISTS = ("fixed", "uniform", "normal")


@dataclass(frozen=True)
class LengthDist:
    """Token counts of one side (input or output) of every request.

    ``fixed``: ``mean`` each; ``uniform``: integers in [low, high], each equally likely;
    ``normal``: round(gauss(mean, stdev)) clipped to [low, high]."""

    kind: str
    mean: int
    low: int
    high: int
    stdev: float = 0.0

    def sample(self, count: int, seed: int) -> list[int]:
        """``count`` lengths, the same for the same seed in any process."""
        rng = random.Random(seed)
        if self.kind == "fixed":
            return [self.mean] * count
        if self.kind == "uniform":
            return [rng.randint(self.low, self.high) for _ in range(count)]
        return [min(self.high, max(self.low, round(rng.gauss(self.mean, self.stdev)))) for _ in range(count)]


def length_dist(side: str, kind: str, mean: int, low: int = 0, high: int = 0, stdev: float = 0.0) -> LengthDist:
    """A checked LengthDist; ``side`` (``input``/``output``) names the parameters in errors.

    ``uniform`` needs ``{side}_min`` and ``{side}_max`` (1 <= min <= max; its ``mean`` is their
    midpoint, ``{side}_len`` is not used); ``normal`` needs a
    positive ``{side}_stdev``, clips to ``{side}_min`` (default 1) and ``{side}_max`` (default
    2 x mean - min, so that the clipping is symmetric and the mean unbiased)."""
    if kind not in LENGTH_DISTS:
        raise ValueError(f"{side}_dist {kind!r}: expected one of {', '.join(LENGTH_DISTS)}")
    if mean < 1:
        raise ValueError(f"{side}_len must be a positive number of tokens (got {mean})")
    if kind == "fixed":
        return LengthDist("fixed", mean, mean, mean)
    if kind == "uniform":
        if low < 1 or high < low:
            raise ValueError(f"{side}_dist uniform needs 1 <= {side}_min <= {side}_max (got {side}_min={low}, "
                             f"{side}_max={high})")
        return LengthDist("uniform", (low + high) // 2, low, high)  # {side}_len is not used
    if not (stdev > 0 and math.isfinite(stdev)):
        raise ValueError(f"{side}_dist normal needs a positive {side}_stdev (got {stdev})")
    low = low or 1
    high = high or 2 * mean - low
    if low < 1 or not low <= mean <= high:
        raise ValueError(f"{side}_dist normal needs 1 <= {side}_min <= {side}_len <= {side}_max (got "
                         f"{side}_min={low}, {side}_len={mean}, {side}_max={high})")
    return LengthDist("normal", mean, low, high, float(stdev))


def lengths_from(params: dict[str, object], side: str) -> LengthDist:
    """The LengthDist of ``side`` from a run's parameters (``{side}_len``, ``_dist``, ``_min``,
    ``_max``, ``_stdev``), defaults as the workload's; ValueError says which one is wrong."""
    def number(name: str, default: float, kind: type) -> float:
        value = params.get(name)
        if value in (None, ""):
            return default
        try:
            return kind(value)  # type: ignore[no-any-return]
        except (TypeError, ValueError):
            raise ValueError(f"{name} {value!r} is not a {'whole ' if kind is int else ''}number") from None

    return length_dist(side, str(params.get(f"{side}_dist") or "fixed"),
                       int(number(f"{side}_len", DEFAULT_LEN[side], int)),
                       int(number(f"{side}_min", 0, int)), int(number(f"{side}_max", 0, int)),
                       float(number(f"{side}_stdev", 0.0, float)))


DEFAULT_LEN = {"input": 128, "output": 64}  # the workload's --input-len and --output-len defaults
