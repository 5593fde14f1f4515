"""Graphcore Bow IPU (Bow-Pod64): Graphcore's PopTorch examples, and their adapter.

Excerpts reproduced from public documents (command lines and the output lines read):

- ALCF AI Testbed user guide, Graphcore "Example Programs", github.com/argonne-lcf/user-guides
  ``docs/ai-testbed/graphcore/example-programs.md`` (commit 7d04a3f9): GPT-2 ``srun --ipus=16
  python .../examples/nlp/gpt2/pytorch/train_gpt2.py --model gpt2 --ipus-per-replica 4
  --replication-factor 4 --gradient-accumulation 2048 --device-iterations 8 --batch-size 1
  --layers-per-ipu 0 4 4 4 ... --max-len 1024 ... --dataset 'generated' --epochs 1`` and its
  per-step lines ``step 1 of epoch 0, loss: ..., throughput: 1058.0979097185766 samples/sec``;
  ResNet-50 ``poprun -vv --vipu-partition=slurm_${SLURM_JOBID} --num-instances=1
  --num-replicas=4 --executable-cache-path=... python3 .../vision/cnns/pytorch/train/train.py
  --config resnet50-pod4 --imagenet-data-path ... --epoch 2 --validation-mode none
  --dataloader-worker 14 --dataloader-rebatch-size 256`` and its per-epoch ``[INFO] throughput:
  7599.7 samples/sec`` lines. ``index.md``: 64 IPUs, 57.6 GB In-Processor-Memory in all (0.9 GB
  each), 22 PFLOP/s half precision in all; the Bow-2000 (4 IPUs) 1.4 PFLOP/s FP16.16.
- ALCF AI-science training series, github.com/argonne-lcf/ai-science-training-series
  ``old/2024-Spring/07_AITestbeds/Graphcore/bert.md``: BERT ``srun --ipus=4 python3
  run_pretraining.py --config demo_tiny_128 --input-files ...`` and its summary
  ``global_batch_size: 16`` / ``device_iterations: 1`` / ``training_steps: 150`` / ``Training
  time: 3.297 secs``.
- Graphcore examples, github.com/graphcore/examples (commit 09b7c672) ``vision/cnns/pytorch/train/``:
  ``configs.yml`` (ResNet-50: ``replicas``, ``batch_size``, ``gradient_accumulation``, ``precision:
  "16.16"``, ``pipeline_splits: []``, i.e. one IPU per replica), ``rn50_pod16.sh`` (``poprun
  --num-instances=8 --num-replicas=16 python3 train.py --config resnet50 --dataloader-worker 14
  --dataloader-rebatch-size 256``), ``train_utils.py`` (``--precision`` 16.16/16.32/32.32,
  ``--gradient-accumulation``, ``--imagenet-data-path``, ``--epoch``, ``--validation-mode``) and
  ``../utils/argparser.py`` (``--batch-size``, ``--replicas``; command-line values override the config).

Not verified here (no IPU is reachable, and the examples were read, not run): the BERT-Large
config name ``pretrain_large_128`` and four IPUs per BERT-Large replica.

Definitions: GPT-2 prints one throughput per step (samples of the step / its time): orch takes
the steps after the warm-up and reports total samples / total time (the harmonic mean of the
printed rates, each step having the same samples). ResNet-50 prints one throughput per epoch:
the same over the epochs after the first. BERT prints its total training time: orch's figure is
global batch x device iterations x steps / that time (every step, no warm-up excluded; the
progress bar's ``throughput`` is kept as ``vendor_progress_samples_per_s``).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Mapping, Sequence

from orchestrator.sites.launchers import LAUNCHERS, LaunchRequest
from orchestrator.sites.vendors import metricsdoc
from orchestrator.sites.vendors.base import Model, VendorRunner, tokens_per_sample

_PAGE = "argonne-lcf/user-guides docs/ai-testbed/graphcore/example-programs.md"
GPT2_IPUS = 4  # --ipus-per-replica 4, --layers-per-ipu 0 4 4 4 (the documented GPT-2 layout)
BERT_IPUS = 4  # srun --ipus=4 run_pretraining.py (the documented BERT run)
GPT2_DEVICE_ITERATIONS = 8
PRECISION = {"fp16": "16.16", "fp32": "32.32"}


@LAUNCHERS.register("poptorch")
class GraphcoreRunner(VendorRunner):
    """One PopTorch process (``srun --nodes=1 --ntasks=1``) driving all the job's IPUs."""

    vendor = "Graphcore Bow IPU"
    adapter = "orchestrator.sites.vendors.graphcore"
    check_case = ("resnet50", 32, None, (("mode", "train"), ("size", "full")))
    vendor_strategy = "vendor-dp"
    parallelism = ("PopTorch's replication (--replication-factor), with the model pipelined over the IPUs of "
                   "each replica where the example does so (gpt2, bert)")
    models = {
        "gpt2": Model("examples nlp/gpt2/pytorch train_gpt2.py (gpt2, 4 IPUs per replica)", _PAGE,
                      frozenset({"grad_accum", "data"}), fixed={"model": "gpt2"}, precisions=("fp16",)),
        "resnet50": Model("examples vision/cnns/pytorch train.py (config resnet50)", _PAGE,
                          frozenset({"image_size"}), fixed={"mode": "train", "size": "full"},
                          precisions=("fp16", "fp32")),
        "bert": Model("examples nlp/bert/pytorch run_pretraining.py (config pretrain_large_128, unverified)",
                      _PAGE, frozenset({"max_predictions", "grad_accum"}), fixed={"size": "large"},
                      precisions=("fp16",)),
    }

    def model_check(self, workload: str, model: Model, precision: str, values: Mapping[str, Any]) -> str | None:
        devices = int(values.get("devices", 1))
        per_replica = {"gpt2": GPT2_IPUS, "bert": BERT_IPUS}.get(workload, 1)
        if devices % per_replica:
            return f"{self.vendor}: {model.app} needs a multiple of {per_replica} IPUs, not {devices}"
        seq = {"gpt2": 1024, "bert": 128}.get(workload)
        if seq and values.get("seq_len") not in (None, seq):
            return f"{self.vendor}: {model.app} is the sequence-{seq} example, not {values.get('seq_len')}"
        if workload == "resnet50" and int(values.get("image_size") or 0) not in (0, 224):
            return f"{self.vendor}: {model.app} trains on 224x224 ImageNet, not {values.get('image_size')}"
        return None

    def applied_strategy(self, workload: str, devices: int) -> str | None:
        """Pipelined replicas for the examples that pipeline the model over several IPUs."""
        if workload in ("gpt2", "bert"):
            return "vendor-pipeline-dp"
        return super().applied_strategy(workload, devices)

    def replicas(self, workload: str, devices: int) -> int:
        return devices // {"gpt2": GPT2_IPUS, "bert": BERT_IPUS}.get(workload, 1)

    def tool(self, req: LaunchRequest, values: dict[str, Any]) -> list[list[str]]:
        examples = str(req.options.get("examples", "graphcore/examples"))
        data = (req.options.get("data_dirs") or {}).get(req.workload)
        srun = ["srun", "--nodes=1", "--ntasks=1", *req.extra_args]
        batch = str(int(values.get("batch_size") or 1))
        accum = str(int(values.get("grad_accum", 1) or 1))
        replicas = str(self.replicas(req.workload, req.devices))
        if req.workload == "gpt2":
            return [[*srun, req.python, f"{examples}/nlp/gpt2/pytorch/train_gpt2.py", "--model", "gpt2",
                     "--ipus-per-replica", str(GPT2_IPUS), "--replication-factor", replicas,
                     "--gradient-accumulation", accum, "--device-iterations", str(GPT2_DEVICE_ITERATIONS),
                     "--batch-size", batch, "--layers-per-ipu", "0", "4", "4", "4", "--matmul-proportion", "0.15",
                     "0.15", "0.15", "0.15", "--max-len", "1024", "--optimizer", "AdamW", "--learning-rate",
                     "0.00015", "--lr-schedule", "cosine", "--lr-warmup", "0.01", "--remap-logit", "True",
                     "--enable-sequence-serialized", "True", "--embedding-serialization-factor", "4",
                     "--recompute-checkpoint-every-layer", "True", "--enable-half-partials", "True",
                     "--replicated-tensor-sharding", "True", "--dataset", "generated", "--epochs", "1"]]
        if req.workload == "bert":
            return [[*srun, req.python, f"{examples}/nlp/bert/pytorch/run_pretraining.py", "--config",
                     "pretrain_large_128", "--input-files", str(data or "bert-data")]]
        # ResNet-50: poprun starts the replicas in the partition Slurm made for the job; the
        # ${SLURM_JOBID} in the partition name is expanded by the capture wrapper (--expand).
        return [[*srun, "poprun", "-vv", "--vipu-partition=slurm_${SLURM_JOBID}", "--num-instances=1",
                 f"--num-replicas={replicas}", "--executable-cache-path=pt_cache", req.python,
                 f"{examples}/vision/cnns/pytorch/train/train.py", "--config", "resnet50", "--replicas", replicas,
                 "--batch-size", batch, "--gradient-accumulation", "1",
                 "--precision", PRECISION[str(values["precision"])],
                 "--imagenet-data-path", str(data or "imagenet"), "--epoch", str(req.options.get("resnet_epochs", 2)),
                 "--validation-mode", "none", "--dataloader-worker", "14", "--dataloader-rebatch-size", "256"]]

    def pre_steps(self, req: LaunchRequest) -> list[list[str]]:
        steps = super().pre_steps(req)
        if req.workload == "resnet50":  # expand ${SLURM_JOBID} at run time, inside the wrapper
            steps[-1] = [*steps[-1][:3], "--expand", *steps[-1][3:]]
        return steps

    def adapter_args(self, req: LaunchRequest, values: dict[str, Any]) -> list[str]:
        out: list[str] = []
        if req.workload == "gpt2":
            samples = (int(values.get("batch_size") or 1) * int(values.get("grad_accum", 1) or 1)
                       * self.replicas("gpt2", req.devices) * GPT2_DEVICE_ITERATIONS)
            out += ["--samples-per-step", str(samples), "--warmup", "1"]
        tokens = tokens_per_sample(req.workload, values)
        if tokens:
            out += ["--seq-len", str(tokens)]
        if req.options.get("device_model"):
            out += ["--device-model", str(req.options["device_model"])]
        return out


# ------------------------------------------------------------------------------------- adapter

_GPT_STEP = re.compile(r"step (?P<step>\d+) of epoch (?P<epoch>\d+),.*throughput: (?P<rate>[\d.eE+-]+) samples/sec")
_EPOCH = re.compile(r"\[INFO\] throughput: (?P<rate>[\d.]+) samples/sec")
_BERT = {name: re.compile(rf"^\s*{name}: (?P<v>[\d.]+)") for name in
         ("global_batch_size", "device_iterations", "training_steps")}
_BERT_TIME = re.compile(r"^\s*Training time: (?P<t>[\d.]+) secs")
_BAR = re.compile(r"throughput: (?P<rate>[\d.]+) samples/sec\]")


# PopTorch's compile progress bar, e.g. ``Graph compilation: 100%|...| 100/100 [00:04<00:00]``
# (elapsed before the ``<``: [H:]MM:SS); the last completed bar is the run's compile.
_COMPILE = re.compile(r"Graph compilation: 100%\|[^|]*\| *\d+/\d+ \[(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)<")


def compile_seconds(text: str) -> float | None:
    """Seconds of the last completed ``Graph compilation`` bar in the output, or None."""
    found = list(_COMPILE.finditer(text))
    if not found:
        return None
    last = found[-1]
    return int(last["h"] or 0) * 3600.0 + int(last["m"]) * 60.0 + int(last["s"])


def figures(text: str, warmup: int, samples_per_step: float, seq_len: int
            ) -> tuple[dict[str, Any], list[float], int, dict[str, Any]]:
    """The run's figures, step times, warm-up steps and format; ``compile_s`` where the log has it."""
    metrics, step_times, warm, info = _figures(text, warmup, samples_per_step, seq_len)
    compiled = compile_seconds(text)
    if compiled is not None:
        metrics["compile_s"] = compiled
    return metrics, step_times, warm, info


def _figures(text: str, warmup: int, samples_per_step: float, seq_len: int
             ) -> tuple[dict[str, Any], list[float], int, dict[str, Any]]:
    lines = text.splitlines()
    steps = [m for m in map(_GPT_STEP.search, lines) if m]
    if steps:
        if not samples_per_step:
            raise metricsdoc.AdapterError("GPT-2 step lines need --samples-per-step")
        rates = [float(m["rate"]) for m in steps]
        timed = rates[warmup:]
        step_times = [samples_per_step / r for r in timed if r > 0]
        metrics = metricsdoc.step_figures(step_times, samples_per_step, seq_len)
        metrics["vendor_last_step_samples_per_s"] = rates[-1]
        return metrics, step_times, min(warmup, len(rates)), {"format": "per-step throughput (train_gpt2.py)"}
    time_match = next((m for m in map(_BERT_TIME.search, lines) if m), None)
    if time_match:
        found = {name: next((float(m["v"]) for m in map(rx.search, lines) if m), None) for name, rx in _BERT.items()}
        if None in found.values():
            raise metricsdoc.AdapterError("BERT 'Training Metrics' block without global_batch_size, "
                                          "device_iterations and training_steps")
        total = float(time_match["t"])
        n = int(found["training_steps"] or 0)
        per_step = found["global_batch_size"] * found["device_iterations"]  # type: ignore[operator]
        step_times = [total / n] * n
        metrics = metricsdoc.step_figures(step_times, per_step, seq_len)
        bars = [float(m["rate"]) for m in map(_BAR.search, lines) if m]
        if bars:
            metrics["vendor_progress_samples_per_s"] = bars[-1]
        return metrics, step_times, 0, {"format": "Training Metrics block (run_pretraining.py)",
                                        "global_batch_size": found["global_batch_size"],
                                        "device_iterations": found["device_iterations"]}
    epochs = [float(m["rate"]) for m in map(_EPOCH.search, lines) if m]
    if epochs:
        timed = epochs[1:] or epochs
        metrics = {"samples_per_s": len(timed) / sum(1.0 / r for r in timed)}
        metrics["vendor_first_epoch_samples_per_s"] = epochs[0]
        return metrics, [], 1 if len(epochs) > 1 else 0, {"format": "per-epoch throughput (train.py)",
                                                          "timed_epochs": len(timed)}
    raise metricsdoc.AdapterError("no 'throughput: ... samples/sec' step, epoch or Training Metrics lines "
                                  "in the PopTorch output")


def build_parser() -> argparse.ArgumentParser:
    parser = metricsdoc.common_parser("python -m orchestrator.sites.vendors.graphcore",
                                          "Graphcore PopTorch example output -> orch metrics file")
    parser.add_argument("--samples-per-step", type=float, default=0.0,
                        help="samples of one printed step (GPT-2: batch x accumulation x replicas x "
                             "device iterations)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return metricsdoc.convert(argv, build_parser(), _document)


def _document(args: argparse.Namespace, text: str) -> dict[str, Any]:
    metrics, step_times, warm, info = figures(text, args.warmup, args.samples_per_step, args.seq_len)
    vendor = {"tool": "Graphcore PopTorch example", "source": _PAGE, **info}
    return metricsdoc.document(args=args, device_type="ipu", metrics=metrics, warmup_steps=warm,
                               step_times=step_times, vendor=vendor)


if __name__ == "__main__":
    sys.exit(main())
