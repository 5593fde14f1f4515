"""Each vendor adapter, run as the rendered script runs it (``python -m orchestrator.sites.vendors.<v>
--from <log> --output metrics.json ...``, in a real process with torch and pydantic made
unimportable, as in a vendor's own environment), on a real output excerpt of the vendor's tool
reproduced from a public page (tests/vendors/samples/, each file's header cites its source).
The file it writes must be a valid ``orch.metrics/1`` document with the figures orch's
definitions give for the excerpt's numbers (worked out below from those numbers).

No vendor hardware is reachable here: these excerpts are what the adapters are checked against.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.results.metrics_schema import MetricsFile
from tests.conftest import REPO

SAMPLES = Path(__file__).resolve().parent / "samples"
# The adapter in a fresh interpreter where torch and orch's own dependencies cannot be imported.
RUNNER = ("import runpy, sys\n"
          "for name in ('torch', 'numpy', 'pydantic', 'sqlalchemy', 'typer', 'jinja2'):\n"
          "    sys.modules[name] = None\n"
          "module = sys.argv[1]\n"
          "sys.argv = [module] + sys.argv[2:]\n"
          "runpy.run_module(module, run_name='__main__')\n")


def adapt(tmp_path: Path, vendor: str, sample: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "metrics.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, f"orchestrator.sites.vendors.{vendor}",
                           "--from", str(SAMPLES / sample), "--output", str(out), *args],
                          cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(REPO)}, timeout=60)
    return proc, out


def metrics_of(tmp_path: Path, vendor: str, sample: str, *args: str) -> MetricsFile:
    proc, out = adapt(tmp_path, vendor, sample, *args)
    assert proc.returncode == 0, proc.stderr
    return MetricsFile.model_validate(json.loads(out.read_text()))


def test_every_sample_cites_its_public_source() -> None:
    samples = sorted(SAMPLES.glob("*.log"))
    assert {p.name.split("_")[0] for p in samples} == {"cerebras", "sambanova", "graphcore", "groq"}
    for path in samples:
        head = path.read_text().splitlines()[:4]
        assert head[0].startswith("# Excerpt reproduced unchanged from a public document"), path
        assert head[1].startswith("# https://github.com/argonne-lcf/"), path
        assert "/blob/" in head[1] and len(head[1].split("/blob/")[1].split("/")[0]) == 40, path  # a commit


def test_cerebras_bert_large(tmp_path: Path) -> None:
    """Train lines every 100 steps: the window after step 100 (the warm-up) to step 1000."""
    doc = metrics_of(tmp_path, "cerebras", "cerebras_bert_large.log", "--workload", "bert", "--precision",
                     "bf16", "--warmup", "100", "--batch-size", "1024", "--seq-len", "128")
    seconds = (12 * 60 + 2.285) - (8 * 60 + 14.365)  # 20:12:02,285 (step 1000) - 20:08:14,365 (step 100)
    samples = 900 * 1024
    m = doc.metrics
    assert m["samples_per_s"] == pytest.approx(samples / seconds, rel=1e-9)
    assert m["tokens_per_s"] == pytest.approx(samples * 128 / seconds, rel=1e-9)
    assert m["timed_time_s"] == pytest.approx(seconds, rel=1e-9)
    assert m["step_time_s"] == m["step_time_p50_s"]  # the median step, as every workload reports it
    assert doc.timing.warmup_steps == 100 and doc.timing.timed_steps == 900
    assert m["vendor_global_rate_samples_per_s"] == 4047.95  # the zoo's own figure, kept by name
    assert m["vendor_processed_samples_per_s"] == pytest.approx(1024000 / 336.373620536)
    assert doc.device.type == "wse" and doc.params["global_batch_size"] == 1024
    # No warm-up: the window starts at "Beginning appliance run" (20:07:49,284) as step 0.
    whole = metrics_of(tmp_path, "cerebras", "cerebras_bert_large.log", "--workload", "bert", "--precision",
                       "bf16", "--warmup", "0", "--batch-size", "1024")
    assert whole.metrics["samples_per_s"] == pytest.approx(1000 * 1024 / ((12 * 60 + 2.285) - (7 * 60 + 49.284)))


def test_sambanova_unet_single_instance(tmp_path: Path) -> None:
    """'inner train loop time : T for 10 epochs, number of global steps: 130, e2e samples_per_sec: R'."""
    doc = metrics_of(tmp_path, "sambanova", "sambanova_unet.log", "--workload", "unet", "--precision", "bf16")
    t, steps, rate = 374.6789753437042, 130, 88.82270474202953
    assert doc.metrics["samples_per_s"] == pytest.approx(rate, rel=1e-12)
    assert doc.metrics["step_time_s"] == pytest.approx(t / steps)
    assert doc.timing.timed_steps == steps and doc.timing.warmup_steps == 0  # the tool times every step
    assert doc.device.type == "rdu"


def test_sambanova_unet_eight_instances_are_summed(tmp_path: Path) -> None:
    """The ALCF page averages the instances' rates; orch's figure is their samples over the longest loop."""
    lines = [(36.314290046691895, 563.9653143065), (33.36756229400635, 613.7697389922524),
             (33.94625234603882, 603.3066563941279), (32.309499979019165, 633.8692958200872),
             (31.418426036834717, 651.8467849404489), (28.164129495620728, 727.1660927132315),
             (30.29698896408081, 675.9747651583616), (25.332663536071777, 808.442427336472)]
    doc = metrics_of(tmp_path, "sambanova", "sambanova_unet_8_instances.log", "--workload", "unet",
                     "--precision", "bf16", "--devices", "8")
    total = sum(t * r for t, r in lines)
    assert doc.metrics["samples_per_s"] == pytest.approx(total / max(t for t, _ in lines), rel=1e-9)
    assert doc.metrics["vendor_mean_instance_samples_per_s"] == pytest.approx(sum(r for _, r in lines) / 8)
    assert doc.world_size == 8 and doc.vendor["instances"] == 8  # type: ignore[attr-defined]


def test_sambanova_bert_timed_iterations(tmp_path: Path) -> None:
    doc = metrics_of(tmp_path, "sambanova", "sambanova_bert_large.log", "--workload", "bert", "--precision",
                     "bf16", "--devices", "2", "--seq-len", "128")
    assert doc.metrics["samples_per_s"] == pytest.approx(665.8816225861821, rel=1e-12)
    assert doc.metrics["tokens_per_s"] == pytest.approx(665.8816225861821 * 128, rel=1e-12)
    assert doc.metrics["step_time_s"] == pytest.approx(30.75621747970581 / 10)
    assert doc.timing.timed_steps == 10 and doc.vendor["workers"] == 2  # type: ignore[attr-defined]


def test_graphcore_gpt2_steps(tmp_path: Path) -> None:
    """Per-step rates; step 0 (warm-up) dropped; throughput = samples / summed step times."""
    per_step = 1 * 2048 * 4 * 8  # batch x gradient accumulation x replicas x device iterations
    doc = metrics_of(tmp_path, "graphcore", "graphcore_gpt2.log", "--workload", "gpt2", "--precision", "fp16",
                     "--devices", "16", "--warmup", "1", "--samples-per-step", str(per_step), "--seq-len", "1024")
    rates = [1058.0979097185766, 1058.7595523807183, 1059.6762623043378]
    seconds = sum(per_step / r for r in rates)
    assert doc.metrics["samples_per_s"] == pytest.approx(3 * per_step / seconds, rel=1e-12)
    assert doc.metrics["tokens_per_s"] == pytest.approx(3 * per_step * 1024 / seconds, rel=1e-12)
    assert doc.timing.step_times_s == pytest.approx([per_step / r for r in rates])
    assert doc.timing.warmup_steps == 1 and doc.device.type == "ipu"


def test_graphcore_resnet50_epochs(tmp_path: Path) -> None:
    doc = metrics_of(tmp_path, "graphcore", "graphcore_resnet50.log", "--workload", "resnet50",
                     "--precision", "fp16", "--devices", "4")
    assert doc.metrics["samples_per_s"] == pytest.approx(8125.8)  # epoch 2; epoch 1 is the warm-up
    assert doc.metrics["vendor_first_epoch_samples_per_s"] == pytest.approx(7599.7)
    assert doc.metrics["compile_s"] == 4.0  # 'Graph compilation: 100%|...| 100/100 [00:04<00:00]'


def test_graphcore_compile_time_only_where_the_log_gives_it() -> None:
    from orchestrator.sites.vendors import graphcore

    bar = "Graph compilation: 100%|##########| 100/100 [{}<00:00]"
    assert graphcore.compile_seconds(bar.format("01:02:03")) == 3723.0
    assert graphcore.compile_seconds(bar.format("02:30") + "\n" + bar.format("00:07")) == 7.0  # the last bar
    assert graphcore.compile_seconds("Graph compilation:  40%|####| 40/100 [00:02<00:03]") is None  # unfinished
    gpt2 = (SAMPLES / "graphcore_gpt2.log").read_text()
    assert "compile_s" not in graphcore.figures(gpt2, 1, 8.0, 1024)[0]


def test_graphcore_bert_training_metrics(tmp_path: Path) -> None:
    doc = metrics_of(tmp_path, "graphcore", "graphcore_bert.log", "--workload", "bert", "--precision", "fp16",
                     "--devices", "4", "--seq-len", "128")
    assert doc.metrics["samples_per_s"] == pytest.approx(16 * 1 * 150 / 3.297)
    assert doc.metrics["vendor_progress_samples_per_s"] == pytest.approx(749.6)
    assert doc.timing.timed_steps == 150


def test_groq_resnet50_table(tmp_path: Path) -> None:
    doc = metrics_of(tmp_path, "groq", "groq_resnet50.log", "--workload", "resnet50", "--precision", "fp16")
    m = doc.metrics
    assert m["samples_per_s"] == pytest.approx(2515.15) and m["latency_s"] == pytest.approx(0.40e-3)
    assert m["vendor_on_chip_latency_s"] == pytest.approx(0.33e-3)
    assert m["vendor_on_chip_samples_per_s"] == pytest.approx(2985.40)
    assert m["vendor_accuracy_percent"] == pytest.approx(84.51)  # the groq row, not the cpu row
    assert doc.device.type == "lpu" and doc.params["batch_size"] == 1


@pytest.mark.parametrize("vendor, args", [
    ("cerebras", ["--batch-size", "8"]), ("sambanova", []), ("graphcore", ["--samples-per-step", "8"]), ("groq", []),
])
def test_output_without_figures_is_one_line_and_no_file(tmp_path: Path, vendor: str, args: list[str]) -> None:
    """A vendor run that printed none of the lines read: exit 3, one line, no metrics file (missing_metrics)."""
    proc, out = adapt(tmp_path, vendor, "../test_adapters.py", "--workload", "gpt2", "--precision", "bf16", *args)
    assert proc.returncode == 3 and not out.exists()
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("orch adapter: ")


def test_capture_keeps_the_output_and_the_exit_status(tmp_path: Path) -> None:
    tool = "import os, sys; print('out', os.environ.get('ORCH_X')); print('err', file=sys.stderr); sys.exit(4)"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.sites.vendors.capture", "--expand", "--log", "v.log",
                           "--", sys.executable, "-c", tool + " # ${ORCH_X}"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(REPO), "ORCH_X": "42"}, timeout=60)
    assert proc.returncode == 4
    assert set(proc.stdout.split()) == {"out", "42", "err"}  # stdout and stderr, merged, with $ORCH_X expanded
    assert set((tmp_path / "v.log").read_text().split()) == {"out", "42", "err"}


def test_params_overlay_writes_the_runs_values(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("train_input:\n  batch_size: 95\nmodel:\n  num_hidden_layers: 48\n  fp16_type: cbfloat16\n")
    subprocess.run([sys.executable, "-m", "orchestrator.sites.vendors.params", "--base", str(base), "--set",
                    "train_input.batch_size=8", "--set", "model.fp16_type=bfloat16", "--set",
                    "runconfig.log_steps=1", "--output", "p.yaml"], cwd=tmp_path, check=True,
                   env={"PYTHONPATH": str(REPO)}, timeout=60)
    import yaml

    assert yaml.safe_load((tmp_path / "p.yaml").read_text()) == {
        "train_input": {"batch_size": 8}, "model": {"num_hidden_layers": 48, "fp16_type": "bfloat16"},
        "runconfig": {"log_steps": 1}}
