"""What the two validations against published figures print after their tables
(benchmarks/validate_published.py, step time; benchmarks/validate_memory.py, peaks)."""

from __future__ import annotations

from typing import Any


def print_tail(report: dict[str, Any]) -> None:
    """Every excluded entry with its reason, the factors beside their priors, each half's errors."""
    for i in report["excluded"]:
        print(f"excluded {i['id']}: {i['reason']}")
    print("factors:", report["factors"], " priors:", report["priors"])
    for half in ("fit", "held_out"):
        s = report[half]
        print(f"{half}: n={s['n']} mean |err| {s['mean_abs_pct']:.1f}%  max |err| {s['max_abs_pct']:.1f}%")
