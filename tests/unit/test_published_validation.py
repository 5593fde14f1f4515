"""The time model against published, cited measurements (issue 25; benchmarks/validate_published.py).

The issue's acceptance bounds on the held-out half: mean |error| <= 10% and max <= 25% (the
script's TARGET_MEAN, TARGET_MAX). Reached on 2026-11-27 with the fp8 entries in: held-out mean
9.0%, max 20.4% (benchmarks/RESULTS.md). The factors are fitted on the fit half only; the last test checks that
the held-out half cannot move them.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "validate_published.py"


def _script() -> ModuleType:
    return importlib.import_module("benchmarks.validate_published")


def test_held_out_error_within_the_issues_bounds() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--json"], capture_output=True, text=True, check=True,
                         cwd=ROOT, timeout=300)
    report = json.loads(out.stdout)
    held = report["held_out"]
    assert held["n"] >= 15
    module = _script()
    assert (module.TARGET_MEAN, module.TARGET_MAX) == (0.10, 0.25)  # the issue's bounds, unchanged
    assert held["mean_abs_pct"] <= 100 * module.TARGET_MEAN, held
    assert held["max_abs_pct"] <= 100 * module.TARGET_MAX, held
    # Every exclusion carries its reason.
    assert all(e["reason"] for e in report["excluded"])


def test_split_is_deterministic_and_covers_each_source_and_device() -> None:
    module = _script()
    cases, _ = module.load_cases()
    fit_a, held_a = module.split(cases)
    fit_b, held_b = module.split(list(reversed(cases)))
    assert [c.id for c in fit_a] == [c.id for c in fit_b] and [c.id for c in held_a] == [c.id for c in held_b]
    assert not {c.id for c in fit_a} & {c.id for c in held_a}
    groups: dict[tuple[str, str], int] = {}
    for c in cases:
        groups[(c.group, c.device)] = groups.get((c.group, c.device), 0) + 1
    for key, count in groups.items():
        if count >= 2:  # a group of two or more has members on both sides
            assert any((c.group, c.device) == key for c in fit_a), key
            assert any((c.group, c.device) == key for c in held_a), key
    assert {c.device for c in fit_a} == {c.device for c in held_a}


def test_the_fit_never_sees_the_held_out_half() -> None:
    """Changing a held-out entry's published figure changes no fitted factor."""
    module = _script()
    cases, _ = module.load_cases()
    fit_half, held = module.split(cases)
    from orchestrator.predict.perfmodel.machine import DEFAULT_EFFICIENCY

    base = DEFAULT_EFFICIENCY["cuda"]
    priors = {"matmul:A100": 0.6, "matmul:H100": 0.5, "matmul:V100": 0.5, "step_overhead_ms": 20.0}
    before = module.fit(fit_half, base, priors)
    held[0].published_s *= 3
    assert module.fit(fit_half, base, priors) == before
