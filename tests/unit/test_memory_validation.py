"""The memory model against published, cited measured peaks (issue 25; benchmarks/validate_memory.py).

The issue: "memory within 10% of published measured peaks", on the held-out half: its mean and every
entry; and on the blind entries, added after the model was frozen (2cf32b8) and predicted once (1.3%
mean, 5.6% max on 2026-11-27). benchmarks/RESULTS.md says which terms were added with which row in
view, and which blind set was spent shaping them.
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
    assert held["max_abs_pct"] <= 100 * module.TARGET_MAX, held
    assert all(e["reason"] for e in report["excluded"])  # every exclusion carries its reason
    # The plan's own traced prediction (orch's gpt2 program with the published program's choices),
    # no factor: within the 10% of each published peak it is set beside.
    blind = report["blind"]  # added after the model was frozen, predicted once
    assert blind["n"] >= 6
    assert blind["mean_abs_pct"] <= 100 * module.TARGET_MEAN and blind["max_abs_pct"] <= 100 * module.TARGET_MAX, blind
    plan = [e for e in report["entries"] if e["half"] == "plan"]
    assert plan and report["plan"]["n"] == len(plan)
    assert all(abs(e["error_pct"]) <= 100 * module.TARGET_MAX for e in plan), plan


def test_kept_gradients_are_what_brings_the_plans_prediction_to_the_published_peak() -> None:
    """The plan row's program choice matters and is what the published program made: with the
    gradients freed between steps (torch >= 2.0's default) the trace is over 15% below the peak that
    Lightning on torch 1.x measured; kept (zeroed in place), within 10%. Kept adds one fp32 gradient
    per parameter (4 bytes of GPT-2 XL's 1.56e9) to the peak, as the real run holds it."""
    from orchestrator.predict import memory

    module = _script()
    entry, p = next(iter(module.PLAN_RUNS.items()))
    cases, _ = module.load_cases()
    published = next(c.published for c in cases if c.id == entry)
    kept, _ = memory.predicted("gpt2", p, memory.predict_bytes)
    freed, _ = memory.predicted("gpt2", dict(p, zero_grad="none"), memory.predict_bytes)
    assert abs(kept - published) / published <= module.TARGET_MAX
    assert (published - freed) / published > 0.15
    assert kept - freed >= 0.9 * 4 * 1.557e9


def test_split_is_deterministic_and_covers_each_source() -> None:
    module = _script()
    cases, _ = module.load_cases()
    cases = [c for c in cases if not c.blind]  # blind entries are in neither half
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
    """Changing a held-out or blind entry's published peak changes no fitted factor."""
    module = _script()
    cases, _ = module.load_cases()
    fit_half, held, _ = module.halves(cases)
    before = module.fit(fit_half)
    held[0].published *= 3
    for c in cases:
        if c.blind:
            c.published *= 3
    assert module.fit(fit_half) == before
    assert not any(c.blind for c in fit_half + held)


def test_a_worse_model_fails_the_bound() -> None:
    """The check can fail: dropping the activations (a model that forgets a term) breaks the mean."""
    module = _script()
    cases, _ = module.load_cases()
    fit_half, held, _ = module.halves(cases)
    for c in cases:
        c.parts.pop("activations", None)
    rows = module.errors(held, module.fit(fit_half))
    assert module.summary(rows)["mean_abs_pct"] > 100 * module.TARGET_MEAN


def test_torch_1_10s_softmax_input_is_what_the_batch_4_bert_rows_hold() -> None:
    """The BERT rows ran on torch 1.10 (January 2022), whose softmax kept its input for the backward:
    one more fp32 b x a x s x s tensor per layer. Without it the batch-4 rows fall past the bound;
    the batch-1 rows (a quarter of the tensor) stay within it either way."""
    module = _script()
    cases, _ = module.load_cases()
    fit_half, held, _ = module.halves(cases)
    factors = module.fit(fit_half)
    bert4 = [c for c in cases if c.id.startswith("hf-bert-large") and "-bs4-" in c.id]
    assert len(bert4) == 2 and all(c.parts["activations"] > 0 for c in bert4)
    with_term = [abs(e) for _, _, e in module.errors(bert4, factors)]
    for c in bert4:  # the same runs with torch >= 1.11's softmax (its output only)
        a, s, layers, b = 16, 512, 24, 4
        c.parts["activations"] -= 4 * a * s * s * layers * b
    without = [abs(e) for _, _, e in module.errors(bert4, factors)]
    assert max(with_term) <= module.TARGET_MAX < max(without)


def test_softmax_input_counts_one_score_tensor_per_layer_in_its_dtype() -> None:
    """By hand: b x a x s x s scores a layer, per token a*s elements: fp32 and amp (HF's fp32 mask
    promotes the scores) 4 bytes each, 16-bit 2; fused attention materialises no scores."""
    from benchmarks.analytic_memory import Shape, saved_per_token

    def bert(fused: bool, saves_input: bool) -> Shape:
        return Shape(layers=24, hidden=1024, heads=16, vocab=30522, seq=512, fused_attention=fused,
                     softmax_saves_input=saves_input)

    for precision, width in (("fp32", 4), ("amp", 4), ("bf16", 2)):
        extra = saved_per_token(bert(False, True), precision) - saved_per_token(bert(False, False), precision)
        assert extra == width * 16 * 512
    assert saved_per_token(bert(True, True), "fp32") == saved_per_token(bert(True, False), "fp32")
