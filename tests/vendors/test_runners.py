"""Vendor runners as the planner uses them: what each renders for a run of the studies, and the
runs each refuses, planned as skipped with the reason (through :func:`orchestrator.plan.resolve.resolve`).

The command lines are the ALCF AI Testbed pages' (cited in each orchestrator/sites/vendors/ module);
nothing here reaches vendor hardware, which is not available to these tests.
"""

from __future__ import annotations

import pytest

from orchestrator.plan.expand import RunSpec
from orchestrator.plan.resolve import Resolved, resolve
from orchestrator.predict.formulas import formula_for
from orchestrator.sites.profiles import load_site
from orchestrator.sites.vendors.base import runner_for

# $HOME: where the ALCF pages put the vendors' clones and environments (read when a plan is made).
ENV = {"ORCH_AI_TESTBED_PROJECT": "proj", "HOME": "/home/user"}


def plan(system: str, workload: str, precision: str, devices: int = 1, batch: int | None = None,
         seq: int | None = None, **params: object) -> Resolved:
    spec = RunSpec(sweep="s", experiment="e", workload=workload, site="alcf-ai-testbed", system=system,
                   devices=devices, precision=precision, strategy=None, batch_size=batch, seq_len=seq, repeat=0,
                   params=tuple(sorted(params.items())), walltime_s=1800)
    return resolve(spec, load_site(f"alcf-ai-testbed:{system}"), ENV, "python")


def commands(r: Resolved) -> list[list[str]]:
    assert r.placement is not None, r.skip_reason
    return [*r.placement.pre_steps, r.placement.argv]


def test_sambanova_gpt2_xl_compiles_then_runs_data_parallel_then_adapts() -> None:
    compile_, run, adapt = commands(plan("sambanova", "gpt2", "bf16", devices=16, batch=16, seq=1024,
                                         model="gpt2-xl", warmup=2, iters=10))
    assert compile_[1].endswith("nlp/transformers_on_rdu/transformers_hook.py") and compile_[2] == "compile"
    assert compile_[compile_.index("-b") + 1] == "16" and "--data-parallel" in compile_
    assert compile_[compile_.index("-ws") + 1] == "2" and "--pef-name=orch_gpt2" in compile_
    assert any(w.endswith("gpt2_config_xl_50260.json") for w in compile_)
    assert run[:6] == ["python", "-m", "orchestrator.sites.vendors.capture", "--log", "vendor.log", "--"]
    assert run[6:10] == ["srun", "--nodes=2", "--ntasks-per-node=8", "--mpi=pmi2"]
    assert run[run.index("--max_steps") + 1] == "12" and "--reduce-on-rdu" in run
    assert "--pef=pef/orch_gpt2/orch_gpt2.pef" in run and run[run.index("-b") + 1] == "16"
    assert adapt[:7] == ["python", "-m", "orchestrator.sites.vendors.sambanova", "--from", "vendor.log", "--output",
                         "metrics.json"]


@pytest.mark.parametrize("system, precision, devices", [("sambanova", "bf16", 8), ("graphcore", "fp16", 8)])
def test_gradient_accumulation_reaches_the_vendor_command(system: str, precision: str, devices: int) -> None:
    """Study A Fig. 6b-c: the sweep's grad_accum is the vendor tool's accumulation count; GAS 1 leaves
    SambaFlow's documented command as it was."""
    model = {"sambanova": "gpt2-xl", "graphcore": "gpt2"}[system]
    flag = {"sambanova": "--gradient_accumulation_steps", "graphcore": "--gradient-accumulation"}[system]
    for accum in (4, 32):
        steps = commands(plan(system, "gpt2", precision, devices=devices, batch=1, seq=1024, model=model,
                              grad_accum=accum))
        tool = [step for step in steps if any(w.endswith((".py", "train_gpt2.py")) for w in step)]
        assert tool and all(step[step.index(flag) + 1] == str(accum) for step in tool)
    single = commands(plan(system, "gpt2", precision, devices=devices, batch=1, seq=1024, model=model))
    if system == "sambanova":
        assert not any(flag in step for step in single)


def test_cerebras_writes_the_runs_values_into_the_model_zoos_params() -> None:
    params, run, adapt = commands(plan("cerebras", "transformer_block", "bf16", batch=16, seq=1024, hidden=1600,
                                       heads=25, warmup=5, iters=20))
    sets = [params[i + 1] for i, w in enumerate(params) if w == "--set"]
    assert {"train_input.batch_size=16", "model.num_hidden_layers=1", "model.hidden_size=1600", "model.num_heads=25",
            "model.fp16_type=bfloat16", "runconfig.max_steps=25", "runconfig.log_steps=1"} <= set(sets)
    assert params[params.index("--base") + 1].endswith("models/nlp/gpt2/configs/params_gpt2_xl.yaml")
    assert run[6:9] == ["python", "/home/user/R_2.4.0/modelzoo/src/cerebras/modelzoo/models/nlp/gpt2/run.py", "CSX"]
    assert run[run.index("--python_paths") + 1] == "/home/user/R_2.4.0/modelzoo/src"
    assert "--num_csx=1" in run and run[run.index("--params") + 1] == "orch-params.yaml"
    assert adapt[adapt.index("--batch-size") + 1] == "16" and adapt[adapt.index("--warmup") + 1] == "5"


def test_graphcore_replicas_and_the_partition_named_at_run_time() -> None:
    (run, adapt) = commands(plan("graphcore", "gpt2", "fp16", devices=16, batch=1, seq=1024, model="gpt2",
                                 grad_accum=2048))
    assert run[:4] == ["python", "-m", "orchestrator.sites.vendors.capture", "--log"]
    assert run[run.index("--replication-factor") + 1] == "4" and run[run.index("--ipus-per-replica") + 1] == "4"
    assert adapt[adapt.index("--samples-per-step") + 1] == str(1 * 2048 * 4 * 8)
    (resnet, _) = commands(plan("graphcore", "resnet50", "fp16", devices=4, batch=32, mode="train"))
    assert resnet[3] == "--expand" and "--vipu-partition=slurm_${SLURM_JOBID}" in resnet
    assert "--num-replicas=4" in resnet and resnet[resnet.index("--precision") + 1] == "16.16"


def test_groq_runs_the_proof_point() -> None:
    (run, adapt) = commands(plan("groq", "distilbert", "fp16", batch=1, seq=128))
    assert run[-1] == "/home/user/groqflow/proof_points/natural_language_processing/distilbert/distilbert.py"
    assert adapt[2] == "orchestrator.sites.vendors.groq"


@pytest.mark.parametrize("system, workload, precision, kw, reason", [
    ("sambanova", "gemm", "bf16", {}, "SambaNova SN30: no documented vendor application for workload gemm"),
    ("sambanova", "gpt2", "bf16", dict(batch=1, seq=1024, model="gpt-13b"), "runs only model=gpt2-xl"),
    ("sambanova", "gpt2", "bf16", dict(batch=1, seq=1024, model="gpt2-xl", sparsity=0.6),
     "has no equivalent of sparsity=0.6"),
    ("sambanova", "bert", "bf16", dict(batch=32, seq=128, grad_accum=4), "has no equivalent of grad_accum=4"),
    ("sambanova", "gpt2", "bf16", dict(batch=1, seq=2048, model="gpt2-xl"), "compiled for sequence 1024, not 2048"),
    ("graphcore", "gpt2", "fp16", dict(devices=2, batch=1, seq=1024, model="gpt2"), "needs a multiple of 4 IPUs"),
    ("graphcore", "bert", "fp32", dict(devices=4, batch=32, seq=128), "runs fp16, not fp32"),
    ("groq", "resnet50", "fp16", dict(batch=16, mode="inference"), "compiles batch 1, not 16"),
    ("groq", "resnet50", "fp16", dict(batch=1, mode="train"), "runs only mode=inference"),
    ("cerebras", "gpt2", "bf16", dict(batch=8, seq=1024, model="gpt2-xl", sparsity=0.9),
     "has no equivalent of sparsity=0.9"),
    ("cerebras", "unet", "bf16", dict(batch=8), "no documented vendor application for workload unet"),
    ("cerebras", "bert", "fp32", dict(batch=8, seq=128), "precision fp32 not supported by Cerebras CS-2"),
])
def test_what_a_vendor_cannot_run_is_skipped_with_the_reason(system: str, workload: str, precision: str,
                                                            kw: dict, reason: str) -> None:
    r = plan(system, workload, precision, devices=kw.pop("devices", 1), batch=kw.pop("batch", None),
             seq=kw.pop("seq", None), **kw)
    assert r.skipped and reason in (r.skip_reason or ""), r.skip_reason


def test_vendor_runs_are_not_judged_by_orchs_pytorch_memory_model() -> None:
    """GPT-2 XL at batch 32 is predicted (orch's PyTorch model) to need more than the CS-2's 40 GB of
    SRAM, yet the model zoo trains it (weights stream from MemoryX): the vendor's documented application
    decides. On Gaudi2, which runs orch's own workloads, the prediction still applies."""
    from workloads import registry

    gpt2 = registry.get("gpt2")
    formula = formula_for("gpt2")
    assert formula is not None
    need = formula({**gpt2.defaults(), "model": "gpt2-xl", "precision": "bf16", "batch_size": 32,
                    "seq_len": 1024, "devices": 1, "strategy": "ddp"}) / 1e9
    sram_gb = load_site("alcf-ai-testbed:cerebras").device.memory_gb
    assert sram_gb is not None and need > sram_gb
    assert not plan("cerebras", "gpt2", "bf16", batch=32, seq=1024, model="gpt2-xl").skipped
    spec = RunSpec(sweep="s", experiment="e", workload="gpt2", site="alcf-ai-testbed", system="gaudi", devices=4,
                   precision="bf16", strategy="zero3", batch_size=1, seq_len=65536, repeat=0,
                   params=(("model", "gpt-13b"),), walltime_s=1800)
    r = resolve(spec, load_site("alcf-ai-testbed:gaudi"), ENV, "python")
    assert r.skipped and "Habana Gaudi2 has 96 GB" in (r.skip_reason or "")


def test_each_system_profile_carries_device_memory() -> None:
    memory = {system: load_site(f"alcf-ai-testbed:{system}").device.memory_gb
              for system in ("sambanova", "graphcore", "groq", "cerebras", "gaudi")}
    assert memory == {"sambanova": 1024, "graphcore": 0.9, "groq": 0.23, "cerebras": 40, "gaudi": 96}
    gaudi = load_site("alcf-ai-testbed:gaudi").device
    assert gaudi.model == "Habana Gaudi2" and gaudi.per_node == 8 and gaudi.type == "hpu"
    assert runner_for("deepspeed") is None and runner_for("cerebras") is not None
