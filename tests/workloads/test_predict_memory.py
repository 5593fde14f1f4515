"""Memory predicted from the program (orchestrator/predict/memory_trace.py) against the real run's peak.

What is measured: ``peak_tensor_bytes``, the gpt2 workload's own figure on CPU (the peak of
live tensor storage bytes of a rank from the model's construction to the last step, max over
ranks: what CUDA's max_memory_allocated counts, without its 512-byte rounding). The real runs
are the workload's body (real tensors, a real gloo group, real DeepSpeed) for every
configuration, one process (1 rank) and one torchrun (2 ranks) for all of them
(tests/workloads/peak_driver.py). The prediction traces the same trainer on fake tensors for
rank 0 of a fake group (ddp, fsdp-full, fsdp-grad-op) or adds DeepSpeed's documented
analytic model to a traced forward/backward (zero1-3).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.workloads.workload_helpers import REPO, load_valid, run_module, undocumented

torch = pytest.importorskip("torch")

MODELS = ("tiny", "gpt-micro")
STRATEGIES = ("ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3")
PRECISIONS = ("fp32", "bf16")
RANKS = (1, 2)
SHAPE = {"batch_size": 4, "seq_len": 64, "vocab_size": 512}
CONFIGS = [(m, s, p, r) for r in RANKS for m in MODELS for s in STRATEGIES for p in PRECISIONS]
# Also run with --zero-grad zeros (the gradients kept between steps, a 2022 program's memory).
KEPT = [("gpt-micro", "ddp", "fp32"), ("gpt-micro", "fsdp-full", "bf16")]


def _argv(model: str, strategy: str, precision: str) -> list[str]:
    return ["--model", model, "--strategy", strategy, "--precision", precision, "--device", "cpu",
            "--batch-size", str(SHAPE["batch_size"]), "--seq-len", str(SHAPE["seq_len"]),
            "--vocab-size", str(SHAPE["vocab_size"]), "--warmup", "1", "--iters", "1"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """Metrics of every configuration's real run, by (model, strategy, precision, ranks)."""
    root = tmp_path_factory.mktemp("peaks")
    # DeepSpeed last and ZeRO-3 at the very end: ZeRO-3 replaces torch's linear for the rest of
    # the process (its own autograd function), which would change what later runs allocate.
    order = [(m, s, p) for s in STRATEGIES for m in MODELS for p in PRECISIONS]
    plain = [c for c in order if not c[1].startswith("zero")]
    argvs = ([_argv(*c) for c in plain] + [_argv(*c) + ["--zero-grad", "zeros"] for c in KEPT]
             + [_argv(*c) for c in order[len(plain):]])
    keys = plain + [("kept", *c) for c in KEPT] + order[len(plain):]
    (root / "configs.json").write_text(json.dumps(argvs))
    found: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for ranks in RANKS:
        out = root / str(ranks)
        out.mkdir()
        run_module("tests.workloads.peak_driver", [str(root / "configs.json"), str(out)], nproc=ranks, timeout=600)
        for i, config in enumerate(keys):
            refused = out / f"{i}.refused"
            assert not refused.exists(), f"{config} on {ranks} rank(s) refused: {refused.read_text()}"
            found[(*config, ranks)] = load_valid(out / f"{i}.json")
    return found


@pytest.fixture(scope="module")
def predict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from orchestrator.predict import memory

    def _predict(model: str, strategy: str, precision: str, ranks: int) -> int:
        return memory.predict_bytes({"model": model, "strategy": strategy, "precision": precision,
                                             "devices": ranks, **SHAPE})

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ORCH_MEMORY_CACHE", str(tmp_path_factory.mktemp("memory-cache")))
        yield _predict


@pytest.mark.parametrize("model,strategy,precision,ranks", CONFIGS,
                         ids=[f"{m}-{s}-{p}-{r}rank" for m, s, p, r in CONFIGS])
def test_predicted_peak_within_10_percent_of_the_real_run(measured: dict[Any, Any], predict: Any, model: str,
                                                         strategy: str, precision: str, ranks: int) -> None:
    doc = measured[(model, strategy, precision, ranks)]
    real = doc["metrics"]["peak_tensor_bytes"]
    predicted = predict(model, strategy, precision, ranks)
    error = (predicted - real) / real
    line = (f"{model} {strategy} {precision} {ranks} rank(s): measured {real:.0f} B, predicted {predicted} B, "
            f"error {error:+.3%}")
    if strategy.startswith("zero"):  # DeepSpeed's reduce bucket is most of it: the rest, on its own
        from orchestrator.predict.traces import DS_REDUCE_BUCKET

        bucket = DS_REDUCE_BUCKET * (4 if precision == "fp32" else 2)
        line += f"; without the bucket {(predicted - real) / (real - bucket):+.1%}"
    print(line)
    assert abs(error) <= 0.10, f"predicted {predicted} bytes, measured {real:.0f} ({error:+.1%})"


@pytest.mark.parametrize("model,strategy,precision", KEPT, ids=["-".join(c) for c in KEPT])
@pytest.mark.parametrize("ranks", RANKS)
def test_kept_gradients_are_measured_and_predicted(measured: dict[Any, Any], predict: Any, model: str,
                                                   strategy: str, precision: str, ranks: int) -> None:
    """--zero-grad zeros keeps every gradient (zeroed) into the next step: the real run's peak rises by
    the rank's gradients (fp32; FSDP: its shard), and the trace predicts it within 10% as it does the default."""
    from orchestrator.predict import memory
    from workloads.models.configs import total_params

    kept = measured[("kept", model, strategy, precision, ranks)]["metrics"]["peak_tensor_bytes"]
    freed = measured[(model, strategy, precision, ranks)]["metrics"]["peak_tensor_bytes"]
    cfg = memory.Inputs.of({"model": model, **SHAPE}).cfg
    grads = 4 * total_params(cfg) / (ranks if strategy.startswith("fsdp") else 1)  # fp32 gradients (FSDP: a shard)
    print(f"{model} {strategy} {precision} {ranks} rank(s): kept {kept:.0f} B, freed {freed:.0f} B, "
          f"gradients {grads:.0f} B")
    # one more gradient set, no more (FSDP on 2 ranks varies by a few % of it from run to run)
    assert abs(kept - freed - grads) <= 0.10 * grads, (kept, freed, grads)
    predicted = memory.predict_bytes({"model": model, "strategy": strategy, "precision": precision,
                                      "devices": ranks, "zero_grad": "zeros", **SHAPE})
    assert abs(predicted - kept) / kept <= 0.10, (predicted, kept)


def test_the_workload_reports_its_peak_and_the_glossary_defines_it(measured: dict[Any, Any]) -> None:
    doc = measured[("tiny", "ddp", "fp32", 2)]
    assert doc["metrics"]["peak_tensor_bytes"] > 0
    assert not undocumented(doc["metrics"])
    # Larger model, larger peak: the figure follows the program, it is not a constant.
    assert (measured[("gpt-micro", "ddp", "fp32", 1)]["metrics"]["peak_tensor_bytes"]
            > measured[("tiny", "ddp", "fp32", 1)]["metrics"]["peak_tensor_bytes"])


def test_sharding_lowers_the_predicted_peak_per_rank(predict: Any) -> None:
    """FSDP's full sharding on 2 ranks holds less per rank than DDP's replicas (buckets and all)."""
    assert predict("gpt-micro", "fsdp-full", "fp32", 2) < predict("gpt-micro", "ddp", "fp32", 2)
    assert predict("gpt-micro", "ddp", "fp32", 2) > predict("gpt-micro", "ddp", "fp32", 1)  # DDP's buckets


@pytest.mark.parametrize("strategy", ["fsdp-full", "fsdp-grad-op"])
def test_fsdp_beyond_4_ranks_extrapolates_to_what_a_direct_trace_gives(predict: Any, strategy: str) -> None:
    """FSDP on 8 ranks is predicted as a + b/N from the 2- and 4-rank traces (traces.by_ranks):
    the same bytes as tracing 8 ranks directly, and less per rank than on 4."""
    from orchestrator.predict import memory, traces
    from orchestrator.predict import memory_trace as predict_memory

    p = {"model": "gpt-micro", "strategy": strategy, "precision": "bf16", "devices": 8, **SHAPE}
    extrapolated = predict("gpt-micro", strategy, "bf16", 8)
    direct = traces.by_layers(memory.Inputs.of(p), predict_memory.measure_step)
    print(f"gpt-micro {strategy} bf16 8 ranks: extrapolated {extrapolated} B, traced {direct} B")
    assert abs(extrapolated - direct) <= 0.001 * direct
    assert extrapolated < predict("gpt-micro", strategy, "bf16", 4)


@pytest.mark.parametrize("strategy,ranks", [("ddp", 2), ("fsdp-full", 2), ("fsdp-grad-op", 1)])
def test_a_deep_model_extrapolates_to_what_a_direct_trace_gives(strategy: str, ranks: int) -> None:
    """Beyond 4 layers the peak is extrapolated from 2- and 3-layer traces (traces.by_layers):
    the same bytes as tracing all 7 layers."""
    from dataclasses import replace

    from orchestrator.predict import memory
    from orchestrator.predict import memory_trace as predict_memory

    p = {"model": "gpt-micro", "strategy": strategy, "precision": "bf16", "devices": ranks, **SHAPE}
    inputs = memory.Inputs.of(p)
    deep = replace(inputs, cfg=inputs.cfg.with_(n_layer=7))
    extrapolated = memory.compute_bytes(deep)
    direct = predict_memory.measure_step(deep)
    print(f"gpt-micro x 7 layers {strategy} bf16 {ranks} rank(s): extrapolated {extrapolated} B, traced {direct} B")
    assert abs(extrapolated - direct) <= 0.001 * direct
    assert extrapolated > memory.compute_bytes(inputs)  # 7 layers hold more than 4


@pytest.mark.parametrize("strategy,ranks", [("ddp", 2), ("fsdp-full", 4), ("fsdp-grad-op", 1)])
def test_many_micro_batches_predict_what_tracing_them_all_gives(predict: Any, strategy: str, ranks: int) -> None:
    """Accumulating 12 micro-batches is traced as 4 (memory.ACCUM_TRACED): the same bytes as all 12."""
    from orchestrator.predict import memory

    p = {"model": "tiny", "strategy": strategy, "precision": "bf16", "devices": ranks, "grad_accum": 12, **SHAPE}
    predicted = memory.predict_bytes(p)
    direct = memory.compute_bytes(memory.Inputs.of(p))
    print(f"tiny {strategy} bf16 {ranks} rank(s), 12 micro-batches: predicted {predicted} B, traced {direct} B")
    assert predicted == direct
    assert predicted > memory.predict_bytes({**p, "grad_accum": 1})  # accumulation holds gradients


def test_a_prediction_is_cached_in_process_and_on_disk(predict: Any) -> None:
    from orchestrator.predict import memory

    first = predict("tiny", "fsdp-grad-op", "bf16", 2)
    files = list(memory.cache_dir().glob("*.json"))
    assert files, "nothing cached on disk"
    memory._cache.clear()  # a new process: the disk serves it
    assert predict("tiny", "fsdp-grad-op", "bf16", 2) == first
    # Values that do not change the program share the prediction (a repeat, the data's seed).
    assert memory.predict_bytes({"model": "tiny", "strategy": "fsdp-grad-op", "precision": "bf16",
                                         "devices": 2, "repeat": 3, "seed": 7, **SHAPE}) == first
    assert not torch.distributed.is_initialized(), "the fake process group outlived the prediction"
    # A plan whose shapes are cached reads them without importing torch (its import is most of
    # a warm plan's time).
    code = ("import sys; sys.modules['torch'] = None\n"
            "import orchestrator.predict.memory as m\n"
            f"print(m.program_bytes('gpt2', {{'model': 'tiny', 'strategy': 'fsdp-grad-op', 'precision': 'bf16',"
            f" 'devices': 2, **{SHAPE!r}}}))")
    env_cache = {"ORCH_MEMORY_CACHE": str(memory.cache_dir())}
    assert run_module_code(code, env_cache).strip() == str(first)


def test_memory_module_imports_without_torch(tmp_path: Path) -> None:
    """The orchestrator imports orchestrator.predict.memory and workloads.registry on login nodes without torch."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "import orchestrator.predict.memory as m, workloads.registry as r\n"
            "from orchestrator.predict.formulas import formula_for\n"
            "w, f = r.get('gpt2'), formula_for('gpt2')\n"
            "p = {**w.defaults(), 'model': 'tiny', 'strategy': 'ddp', 'devices': 1, 'precision': 'fp32',"
            " 'batch_size': 4, 'seq_len': 64}\n"
            "print(m.predicted_bytes('gpt2', p, f) == f(p))")
    proc = run_module_code(code, {"ORCH_MEMORY_CACHE": str(tmp_path)})  # nothing cached: the formula
    assert proc.strip() == "True"


def run_module_code(code: str, extra_env: dict[str, str] | None = None) -> str:
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(REPO), **(extra_env or {}))
    return subprocess.run([sys.executable, "-c", code], cwd=Path(REPO), env=env, capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("model", ["tiny", "gpt-mini", "gpt2"])
@pytest.mark.parametrize("tie_weights,bias", [(True, True), (False, True), (True, False)])
def test_parameter_sizes_without_torch_are_the_models_own(model: str, tie_weights: bool, bias: bool) -> None:
    """configs.param_sizes (what ZeRO-3's model partitions, worked out on login nodes without torch)
    lists the tensors GPT(cfg).parameters() yields, in order."""
    from workloads.models.configs import SIZES, param_sizes
    from workloads.models.gpt import GPT

    cfg = SIZES[model].with_(tie_weights=tie_weights, bias=bias)
    with torch.device("meta"):
        built = GPT(cfg)
    assert param_sizes(cfg) == [p.numel() for p in built.parameters()]


def test_a_plan_traces_its_missing_shapes_side_by_side_and_gets_the_same_bytes(predict: Any, tmp_path: Path) -> None:
    """memory.prefetch (what `orch plan` calls first) traces every leaf the runs need in worker
    processes; each run's prediction then only reads the caches, so the planning process never
    imports torch, and gives the bytes an in-process trace gives."""
    from orchestrator.predict import memory, traces

    runs = [{"model": "gpt-micro", "strategy": "fsdp-full", "precision": "bf16", "devices": 8, **SHAPE},
            {"model": "gpt-micro", "strategy": "zero3", "precision": "fp32", "devices": 2, **SHAPE},
            {"model": "tiny", "strategy": "ddp", "precision": "bf16", "devices": 4, "grad_accum": 6, **SHAPE},
            {"model": "gpt-mini", "strategy": "fsdp-grad-op", "precision": "fp32", "devices": 1, **SHAPE}]
    leaves = {leaf for p in runs for leaf in traces.leaves(memory.Inputs.of(p))}
    code = ("import json, sys\n"
            "from orchestrator.predict import memory\n"
            f"runs = json.loads({json.dumps(runs)!r})\n"
            "inputs = [memory.traced_inputs('gpt2', p) for p in runs]\n"
            "traced, again = memory.prefetch(inputs, 2), memory.prefetch(inputs, 2)\n"
            "values = [memory.program_bytes('gpt2', p) for p in runs]\n"
            "print(json.dumps({'traced': traced, 'again': again, 'values': values, 'torch': 'torch' in sys.modules}))")
    out = json.loads(run_module_code(code, {"ORCH_MEMORY_CACHE": str(tmp_path)}).splitlines()[-1])
    assert out["traced"] == len(leaves) >= memory.POOL_FROM  # every leaf, each once
    assert out["again"] == 0  # then all cached
    assert not out["torch"], "the planning process imported torch"
    assert out["values"] == [memory.predict_bytes(p) for p in runs]
    on_disk = leaves | {traces.normalized(memory.Inputs.of(p)) for p in runs}  # tiny's run is its own leaf
    assert len(list(tmp_path.glob("*.json"))) == len(on_disk) == len(leaves) + 3


@pytest.mark.parametrize("precision,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16),
                                             ("fp8", torch.float8_e4m3fn)])
def test_the_gemm_formula_is_the_bytes_the_gemm_holds(precision: str, dtype: Any) -> None:
    """A, B and the product, live while the step runs (fp8's product is bf16): on the H200 the
    fp8 formula counted a 1-byte product and missed a quarter of the operands' bytes."""
    import types

    from orchestrator.predict.formulas import formula_for
    from workloads.gemm import make_step
    from workloads.harness.livebytes import LiveBytes

    session: Any = types.SimpleNamespace(device=types.SimpleNamespace(torch_device=torch.device("cpu")),
                                    precision=types.SimpleNamespace(name=precision, dtype=dtype), rank=0)
    m, n, k = 64, 48, 32
    with LiveBytes() as live:
        step = make_step(session, m, n, k)
        held = live.live  # the operands (the fp32 draws they were cast from are gone)
        product = step()
        live.track(product)
        assert product.shape == (m, n)
        held_in_step = live.live
    scale = 4 if precision == "fp8" else 0  # fp8's unit scale, one fp32 scalar the formula leaves out
    formula = formula_for("gemm")
    assert formula is not None
    assert formula({"m": m, "n": n, "k": k, "precision": precision}) == held_in_step - scale
    assert held <= held_in_step
