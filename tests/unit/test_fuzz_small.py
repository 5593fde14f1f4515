"""A small run of the input fuzzer (benchmarks/fuzz_inputs.py): 40 generated sweeps and profiles
(fixed seed), in-process, none of which may end in a traceback, a hang, a memory blow-up or an
executed shell snippet. The full campaign (5,000 files) is the benchmark; its figures are in
benchmarks/RESULTS.md. Why a fixed seed: a failure here names a case that reproduces exactly
(`python -m benchmarks.fuzz_inputs --seed 1 --start ID --count 1 --keep DIR`)."""

from __future__ import annotations

from benchmarks import fuzz_inputs

SEED = 1
COUNT = 40


def test_generator_is_deterministic_and_covers_every_generator() -> None:
    first = [(c.generator, c.data) for c in fuzz_inputs.generate(200, SEED)]
    again = [(c.generator, c.data) for c in fuzz_inputs.generate(200, SEED)]
    assert first == again
    assert {g for g, _ in first} == {"grammar-sweep", "deep-sweep", "grammar-site", "mutate-example", "mutate-site",
                                     "special"}


def test_classify_error_shapes() -> None:
    assert fuzz_inputs.classify(0, "", "")[0] == "ok"
    assert fuzz_inputs.classify(2, "", "error: f.yaml:1: name: bad\n")[0] == "clean"
    assert fuzz_inputs.classify(2, "", "error: a\nerror: b\n")[0] == "other"
    assert fuzz_inputs.classify(1, "", "Traceback (most recent call last):\n  x\nValueError: y\n")[0] == "traceback"
    assert fuzz_inputs.classify(None, "", "")[0] == "hang"
    assert fuzz_inputs.classify(1, "", "MemoryError\n")[0] == "blowup"


def test_small_fuzz_run_is_clean() -> None:
    cases = list(fuzz_inputs.generate(COUNT, SEED))
    # A hang never ends: 120 s tells one from a case slowed by a busy machine (the campaign's 20 s
    # alarm is for a quiet one).
    outcomes = fuzz_inputs.run_all(cases, workers=2, timeout=120)
    bad = [(o.id, o.generator, o.cls, o.detail) for o in outcomes if o.cls in fuzz_inputs.BAD]
    assert not bad, bad
    # The run reached both ends: some files planned, some refused with one clean error line.
    classes = {o.cls for o in outcomes}
    assert {"ok", "clean"} <= classes, classes
    # The deep generator's sweeps (real workloads, hostile values within their types) get past
    # validation to resolve and render: that is what it is for.
    assert any(o.generator == "deep-sweep" and o.cls == "ok" for o in outcomes)
