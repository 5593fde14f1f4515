"""Cerebras CS-2: the model zoo's ``run.py CSX`` with a params file, and its adapter.

Excerpts reproduced from public documents (the command lines below and the log format the
adapter reads):

- ALCF AI Testbed user guide, Cerebras "Example Programs", github.com/argonne-lcf/user-guides
  ``docs/ai-testbed/cerebras/example-programs.md`` at commit 1b9ee689 (2025-07-30, the last CS-2
  version; R_2.4.0): BERT-Large ``python run.py CSX --job_labels name=bert_pt --params
  configs/bert_large_MSL128_sampleds.yaml --num_workers_per_csx=1 --mode train --model_dir
  $MODEL_DIR --mount_dirs /home/ /software/ --python_paths .../modelzoo/src --compile_dir
  $(whoami)``, GPT-J with ``--num_csx=1``, and their output (``| Train Device=CSX, Step=...,
  Rate=... samples/sec, GlobalRate=... samples/sec`` lines, ``Processed N sample(s) in T
  seconds``). The same page for the earlier ai-testbed-userdocs repository
  (``docs/cerebras/System-Overview.md``): 850,000 cores, 40 GB on-chip SRAM.
- ALCF AI-science training series, github.com/argonne-lcf/ai-science-training-series
  ``old/2024-Spring/07_AITestbeds/Cerebras/gpt2.md``: GPT-2 with ``run.py CSX --params
  configs/params_gpt2_small.yaml ...``.
- Cerebras model zoo, github.com/Cerebras/modelzoo tag Release_2.3.0:
  ``src/cerebras/modelzoo/models/nlp/gpt2/configs/params_gpt2_xl.yaml`` (the keys written over:
  ``train_input.batch_size``, ``model.hidden_size``, ``num_hidden_layers``, ``num_heads``,
  ``filter_size``, ``max_position_embeddings``, ``vocab_size``, ``fp16_type``,
  ``mixed_precision``, ``runconfig.max_steps``, ``log_steps``, ``checkpoint_steps``) and
  ``models/nlp/bert/configs/bert_large_MSL128.yaml`` (``train_input.max_predictions_per_seq``);
  ``common/utils/run/cli_parser.py`` (``--params``, ``--mode``, ``--model_dir``, ``--compile_dir``,
  ``--mount_dirs``, ``--python_paths``, ``--num_csx``); ``config_manager/config_classes/base/
  model_config.py`` (``fp16_type``: ``bfloat16``, ``float16`` or ``cbfloat16``) and ``run_config.py``
  (``max_steps``, ``log_steps``, ``checkpoint_steps``).

Not verified here (no CS-2 is reachable, and the zoo was read, not run): a GenSLM (codon,
vocabulary 70) dataset at the path the profile names, and the zoo's GPT-2 with one layer (study
A.1's block) compiling as it stands.

What the adapter reports: the zoo prints one ``Train`` line every ``log_steps`` steps with its
timestamp; orch sets ``log_steps: 1`` and takes the steps after the warm-up steps, so
``samples_per_s`` = (timed steps x global batch) / (time of the last line - time of the line
that ends the warm-up). The zoo's own figures are kept: ``vendor_global_rate_samples_per_s``
(the last ``GlobalRate``: samples since "Beginning appliance run" over the time since then, warm-up
included), ``vendor_rate_samples_per_s`` (the last ``Rate``, a smoothed recent rate) and
``vendor_processed_samples_per_s`` (``Processed N sample(s) in T seconds``: T runs from the start
of the appliance run to the end of training, checkpoint saving included).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

from orchestrator.sites.launchers import LAUNCHERS, LaunchRequest
from orchestrator.sites.vendors import metricsdoc
from orchestrator.sites.vendors.base import Model, VendorRunner, tokens_per_sample

PARAMS_FILE = "orch-params.yaml"
ZOO_NLP = "src/cerebras/modelzoo/models/nlp"
FP16_TYPE = {"bf16": "bfloat16", "fp16": "float16"}
GENSLM_VOCAB = 70  # codons + special tokens (workloads/genslm.py, study A.6)
_SOURCE = "argonne-lcf/user-guides docs/ai-testbed/cerebras/example-programs.md@1b9ee689"


@LAUNCHERS.register("cerebras")
class CerebrasRunner(VendorRunner):
    """``python <zoo>/.../run.py CSX --params orch-params.yaml --num_csx=N --mode train ...``."""

    vendor = "Cerebras CS-2"
    adapter = "orchestrator.sites.vendors.cerebras"
    check_case = ("bert", 256, 128, (("size", "large"),))
    vendor_strategy = "vendor-dp"
    parallelism = "the model zoo's own data parallelism over CS-2 systems (run.py --num_csx)"
    models = {
        "gpt2": Model("model zoo gpt2 (params_gpt2_xl.yaml)", _SOURCE, frozenset({"model", "data"}),
                      precisions=("fp16", "bf16")),
        "genslm": Model("model zoo gpt2 over codons (params_gpt2_xl.yaml, vocabulary 70)", _SOURCE,
                        frozenset({"model", "num_sequences"}), precisions=("fp16", "bf16"),
                        note="unverified: needs a codon dataset in the zoo's HDF5 format "
                             "(launcher.options.data_dirs.genslm)"),
        "transformer_block": Model("model zoo gpt2 with one layer (params_gpt2_xl.yaml)", _SOURCE,
                                   frozenset({"hidden", "heads"}), fixed={"backward": True, "causal": True},
                                   precisions=("fp16", "bf16"),
                                   note="the zoo trains the whole step (embedding, one layer, LM head); "
                                        "forward and backward are not timed apart"),
        "bert": Model("model zoo bert (bert_large_MSL128.yaml)", _SOURCE, frozenset({"max_predictions"}),
                      fixed={"size": "large"}, precisions=("fp16", "bf16")),
    }

    def model_check(self, workload: str, model: Model, precision: str, values: Mapping[str, Any]) -> str | None:
        if workload == "bert" and values.get("seq_len") not in (None, 128):
            return f"{self.vendor}: {model.app} is the MSL128 configuration, not sequence {values.get('seq_len')}"
        return None

    def tool(self, req: LaunchRequest, values: dict[str, Any]) -> list[list[str]]:
        opts = req.options
        zoo = str(opts.get("modelzoo", "modelzoo"))
        app = "bert" if req.workload == "bert" else "gpt2"
        config = "bert_large_MSL128.yaml" if app == "bert" else "params_gpt2_xl.yaml"
        app_dir = f"{zoo}/{ZOO_NLP}/{app}"
        steps = int(values.get("warmup", 5)) + int(values.get("iters", 20))
        global_batch = global_batch_size(values)
        sets = [f"train_input.batch_size={global_batch}",
                "model.mixed_precision=true", f"model.fp16_type={FP16_TYPE[str(values['precision'])]}",
                f"runconfig.max_steps={steps}", "runconfig.log_steps=1", f"runconfig.checkpoint_steps={steps}"]
        sets += _model_sets(req.workload, values)
        data_dir = (opts.get("data_dirs") or {}).get(req.workload)
        if data_dir:
            sets.append(f"train_input.data_dir={data_dir}")
        params = [req.python, "-m", "orchestrator.sites.vendors.params", "--base", f"{app_dir}/configs/{config}",
                  *[w for s in sets for w in ("--set", s)], "--output", PARAMS_FILE]
        run = [req.python, f"{app_dir}/run.py", "CSX", "--params", PARAMS_FILE, f"--num_csx={req.devices}",
               "--mode", "train", "--model_dir", str(opts.get("model_dir", "model_dir"))]
        mounts = [str(m) for m in opts.get("mount_dirs", [])]
        paths = [str(p) for p in opts.get("python_paths", [])]
        if mounts:
            run += ["--mount_dirs", *mounts]
        if paths:
            run += ["--python_paths", *paths]
        run += ["--compile_dir", str(opts.get("compile_dir", "compile_dir")), *req.extra_args]
        return [params, run]

    def adapter_args(self, req: LaunchRequest, values: dict[str, Any]) -> list[str]:
        out = ["--warmup", str(values.get("warmup", 5)), "--batch-size", str(global_batch_size(values))]
        tokens = tokens_per_sample(req.workload, values)
        if tokens:
            out += ["--seq-len", str(tokens)]
        if req.options.get("device_model"):
            out += ["--device-model", str(req.options["device_model"])]
        return out


def global_batch_size(values: Mapping[str, Any]) -> int:
    """Samples per optimiser step on the CS-2: the run's micro-batch x accumulation x devices."""
    batch = int(values.get("batch_size") or 1)
    return batch * int(values.get("grad_accum", 1) or 1) * int(values.get("devices", 1) or 1)


def _model_sets(workload: str, values: Mapping[str, Any]) -> list[str]:
    if workload == "bert":
        return [f"train_input.max_predictions_per_seq={values.get('max_predictions', 20)}"]
    if workload == "transformer_block":
        hidden, heads, layers, vocab = int(values["hidden"]), int(values["heads"]), 1, None
    else:
        from workloads.models.configs import SIZES  # pure Python: the sizes orch's GPT workloads use

        size = SIZES[str(values["model"])]
        hidden, heads, layers = size.n_embd, size.n_head, size.n_layer
        vocab = GENSLM_VOCAB if workload == "genslm" else None
    sets = [f"model.hidden_size={hidden}", f"model.num_heads={heads}", f"model.num_hidden_layers={layers}",
            f"model.filter_size={4 * hidden}"]
    if values.get("seq_len"):
        sets.append(f"model.max_position_embeddings={int(values['seq_len'])}")
    if vocab:
        sets.append(f"model.vocab_size={vocab}")
    return sets


# ------------------------------------------------------------------------------------- adapter

_TRAIN = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO:\s+\| Train Device=\w+, "
                    r"Step=(?P<step>\d+), Loss=[^,]*, Rate=(?P<rate>[\d.]+) samples/sec, "
                    r"GlobalRate=(?P<grate>[\d.]+) samples/sec")
_BEGIN = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO:\s+Beginning appliance run")
_PROCESSED = re.compile(r"Processed (?P<n>\d+) (?:training )?sample\(s\) in (?P<t>[\d.]+) seconds")


def _time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc).timestamp()


def parse(text: str) -> dict[str, Any]:
    """The Train lines (step, time, Rate, GlobalRate), the run's start and the Processed line."""
    points: list[tuple[int, float]] = []
    rates: list[tuple[float, float]] = []
    begin: float | None = None
    processed: tuple[int, float] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        match = _TRAIN.match(line)
        if match:
            points.append((int(match["step"]), _time(match["ts"])))
            rates.append((float(match["rate"]), float(match["grate"])))
            continue
        match = _BEGIN.match(line)
        if match and begin is None:
            begin = _time(match["ts"])
            continue
        match = _PROCESSED.search(line)
        if match:
            processed = (int(match["n"]), float(match["t"]))
    return {"points": points, "rates": rates, "begin": begin, "processed": processed}


def figures(parsed: Mapping[str, Any], warmup: int, batch: int,
            seq_len: int) -> tuple[dict[str, Any], list[float], int]:
    points: list[tuple[int, float]] = list(parsed["points"])
    if not points:
        raise metricsdoc.AdapterError("no '| Train Device=CSX, Step=...' lines in the model zoo's output")
    if parsed["begin"] is not None:
        points.insert(0, (0, parsed["begin"]))
    start = next((i for i, (step, _) in enumerate(points) if step >= warmup), None)
    if start is None or start == len(points) - 1:
        raise metricsdoc.AdapterError(f"no Train line after the {warmup} warm-up step(s)")
    step_times: list[float] = []
    for (s0, t0), (s1, t1) in zip(points[start:], points[start + 1:]):
        if s1 > s0:
            step_times += [(t1 - t0) / (s1 - s0)] * (s1 - s0)
    metrics: dict[str, Any] = metricsdoc.step_figures(step_times, batch, seq_len)
    rate, grate = parsed["rates"][-1]
    metrics["vendor_rate_samples_per_s"] = rate
    metrics["vendor_global_rate_samples_per_s"] = grate
    if parsed["processed"]:
        n, t = parsed["processed"]
        metrics["vendor_processed_samples"] = n
        metrics["vendor_processed_time_s"] = t
        metrics["vendor_processed_samples_per_s"] = n / t if t else None
    return metrics, step_times, points[start][0]


def build_parser() -> argparse.ArgumentParser:
    parser = metricsdoc.common_parser("python -m orchestrator.sites.vendors.cerebras",
                                          "Cerebras model zoo output -> orch metrics file")
    parser.add_argument("--batch-size", type=int, required=True, help="global batch (samples per step)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return metricsdoc.convert(argv, build_parser(), _document)


def _document(args: argparse.Namespace, text: str) -> dict[str, Any]:
    parsed = parse(text)
    metrics, step_times, warm = figures(parsed, args.warmup, args.batch_size, args.seq_len)
    vendor = {"tool": "Cerebras model zoo run.py CSX", "source": _SOURCE,
              "definitions": {
                  "vendor_global_rate_samples_per_s": "the zoo's GlobalRate: samples since 'Beginning appliance "
                                                      "run' / time since then (warm-up included)",
                  "vendor_rate_samples_per_s": "the zoo's Rate: a smoothed rate over recent steps",
                  "vendor_processed_samples_per_s": "Processed N samples in T seconds: T from the start of the "
                                                    "appliance run to the end of training "
                                                    "(checkpointing included)"}}
    return metricsdoc.document(args=args, device_type="wse", metrics=metrics, warmup_steps=warm,
                               step_times=step_times, vendor=vendor,
                               params={"global_batch_size": args.batch_size})


if __name__ == "__main__":
    sys.exit(main())
