"""SambaNova SN30: SambaFlow's compile-then-run applications, and their adapter.

Excerpts reproduced from public documents (command lines and the output lines read):

- ALCF AI Testbed user guide, SambaNova pages (removed in 2026), github.com/argonne-lcf/user-guides
  at commit 23fa4c2a^ (the parent of "git rm SN30 and older docs"):
  ``docs/ai-testbed/sambanova/example-programs.md`` (UNet2D: ``python .../compile.py compile
  --mac-v2 --in-channels=3 --in-width=S --in-height=S --batch-size=B --enable-conv-tiling
  --num-tiles=4 --pef-name=... --output-folder=...`` then ``srun ... python
  /opt/sambaflow/apps/image/segmentation//hook.py run ... --pef=...``, and its result line
  ``inner train loop time : 374.6789753437042 for 10 epochs, number of global steps: 130, e2e
  samples_per_sec: 88.82270474202953``; GPT 1.5B: ``transformers_hook.py compile --module_name
  gpt2_pretrain --task_name clm --max_seq_length 1024 -b 32 ... --config_name
  .../gpt2_config_xl_50260.json ... --num-tiles 4`` then ``srun --mpi=pmi2 python
  .../transformers_hook.py run -b 32 --data_dir /data/ANL/ss1024 --pef=... --logging_steps 1
  --max_steps ... --steps_this_run ...``), ``example-multi-node-programs.md`` (``--data-parallel
  -ws 2`` at compile, ``--data-parallel --reduce-on-rdu`` and ``srun --mpi=pmi2`` at run; one
  ``inner train loop time`` line per instance), ``files/BertLarge.sh`` (BERT-Large:
  ``transformers_hook.py compile --model_name_or_path bert-large-uncased --module_name mlm_ns
  --task_name mlm_ns --max_seq_length 128 ...``) and ``miscellaneous.md`` (``snfadm -l
  inventory``: ``Total XRDU_3 memory size (GB): 2048.0`` for an XRDU of two RDUs).
- ALCF ai-testbed-userdocs, github.com/argonne-lcf/ai-testbed-userdocs
  ``docs/sambanova/Steps-to-Run-BERT-Large-on-Sambanova-DataScale-SN10-8R.md``: the BERT-Large
  result lines ``e2e_latency: 30.75621747970581 seconds, throughput: 665.8816225861821 samples/s,
  measured over 10 iterations.`` / ``NOTE: This is the combined throughput for 2 workers``.

Not verified here (no RDU is reachable): what the GPT 1.5B run prints (the ALCF pages show no
output for it: the adapter reads the two documented result formats above and, when neither is
there, says so and writes nothing), the BERT ``--data_dir`` on SN30, and orch's one instance
per RDU (ALCF's multi-node GPT example packs two 4-tile instances on each RDU).

Gradient accumulation (study A Fig. 6b, GAS on SN30): ``transformers_hook.py`` reads Hugging Face's
``TrainingArguments`` (``--per_device_train_batch_size``, ``--do_train``, ``--logging_steps``,
``--max_steps`` above are theirs), whose accumulation flag is ``--gradient_accumulation_steps``; a
gpt2 run with ``grad_accum`` > 1 passes it to the compile and the run (GAS 1 renders the documented
command unchanged). Not verified on an RDU: no ALCF page shows the flag with this application.

Definitions: ``inner train loop time`` is the time of every step of the run (no warm-up is
excluded) and ``e2e samples_per_sec`` = steps x batch / that time; with several instances orch
reports the sum of the instances' samples over the longest instance's loop time (the ALCF page
averages the per-instance rates; that mean is kept as ``vendor_mean_instance_samples_per_s``).
``e2e_latency ... throughput ... measured over N iterations`` is already total samples / timed
time after an untimed "initial run" (the combined figure for all workers): orch's definition.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Mapping, Sequence

from orchestrator.sites.launchers import LAUNCHERS, LaunchRequest
from orchestrator.sites.vendors import metricsdoc
from orchestrator.sites.vendors.base import Model, VendorRunner, tokens_per_sample

APPS = "/opt/sambaflow/apps"  # on every SN30 node (example-programs.md)
HOOK = "nlp/transformers_on_rdu/transformers_hook.py"
GPT_CONFIG = "nlp/transformers_on_rdu/customer_specific/mv/configs/gpt2_config_xl_50260.json"
GPT_DECISIONS = "nlp/transformers_on_rdu/human_decisions_gm"
BERT_DECISIONS = "nlp/transformers_on_rdu/human_decisions"
_PAGES = "argonne-lcf/user-guides docs/ai-testbed/sambanova/ (commit 23fa4c2a^)"


@LAUNCHERS.register("sambaflow")
class SambaNovaRunner(VendorRunner):
    """SambaFlow: ``python <app> compile ... --pef-name`` then ``srun --mpi=pmi2 python <app> run --pef``."""

    vendor = "SambaNova SN30"
    adapter = "orchestrator.sites.vendors.sambanova"
    single_process = False  # one instance (Slurm task) per RDU
    max_nodes = None
    check_case = ("bert", 32, 128, (("size", "large"),))
    vendor_strategy = "vendor-dp"
    parallelism = ("SambaFlow's data parallelism (compiled with --data-parallel -ws 2, run with --data-parallel "
                   "--reduce-on-rdu: one instance per RDU, gradients reduced on the RDUs)")
    models = {
        "gpt2": Model("transformers_on_rdu GPT 1.5B (gpt2_config_xl_50260.json)", _PAGES,
                      frozenset({"data", "grad_accum"}), fixed={"model": "gpt2-xl"}, precisions=("bf16",)),
        "bert": Model("transformers_on_rdu BERT-Large (mlm_ns, sequence 128)", _PAGES,
                      frozenset({"max_predictions"}), fixed={"size": "large"}, precisions=("bf16",)),
        "unet": Model("UNet2D (apps/image/segmentation)", _PAGES, frozenset({"image_size"}),
                      fixed={"mode": "train", "size": "full"}, precisions=("bf16",)),
    }

    def model_check(self, workload: str, model: Model, precision: str, values: Mapping[str, Any]) -> str | None:
        seq = {"gpt2": 1024, "bert": 128}.get(workload)
        if seq and values.get("seq_len") not in (None, seq):
            return f"{self.vendor}: {model.app} is compiled for sequence {seq}, not {values.get('seq_len')}"
        if workload == "unet" and int(values.get("image_size") or 0) not in (256, 512, 1024):
            return f"{self.vendor}: {model.app} takes images of 256, 512 or 1024 pixels, not {values.get('image_size')}"
        return None

    def tool(self, req: LaunchRequest, values: dict[str, Any]) -> list[list[str]]:
        apps = str(req.options.get("apps", APPS))
        data = (req.options.get("data_dirs") or {}).get(req.workload)
        batch = str(int(values.get("batch_size") or 1))
        parallel = req.devices > 1
        pef = f"orch_{req.workload}"
        srun = ["srun", f"--nodes={req.nodes}", f"--ntasks-per-node={req.tasks_per_node}", "--mpi=pmi2",
                *req.extra_args]
        steps = str(int(values.get("warmup", 5)) + int(values.get("iters", 20)))
        if req.workload == "unet":
            size = str(int(values["image_size"]))
            compile_ = [req.python, f"{apps}/image/segmentation/compile.py", "compile", "--mac-v2", "--in-channels=3",
                        f"--in-width={size}", f"--in-height={size}", f"--batch-size={batch}",
                        "--enable-conv-tiling", "--num-tiles=4", f"--pef-name={pef}", "--output-folder=pef"]
            run = [*srun, req.python, f"{apps}/image/segmentation/hook.py", "run", "--data-cache=cache",
                   "--data-in-memory", f"--num-workers={req.options.get('num_workers', 8)}", "--enable-tiling",
                   "--in-channels=3", f"--in-width={size}", f"--in-height={size}", "--init-features", "32",
                   f"--batch-size={batch}", "--epochs", str(req.options.get("unet_epochs", 10)),
                   "--data-dir", str(data or "unet-data"), "--log-dir", "log_dir_unet", f"--pef=pef/{pef}/{pef}.pef"]
            if parallel:
                compile_ += ["--data-parallel", "-ws", "2"]
                run += ["--data-parallel", "--reduce-on-rdu"]
            return [compile_, run]
        hook = f"{apps}/{HOOK}"
        if req.workload == "gpt2":
            # The single-instance and the data-parallel example use different decision files.
            decisions = "pardp2_lnsd" if not parallel else "nonpardp_lnsd"
            configs = "compiler_configs_gpt1dot5b_perf.json" if not parallel else (
                "compiler_configs_gpt2_sc_recompute_spatialmapping_tiling16_clsmerge_withcls_nonpardp_norc_e2e.json")
            model = ["--module_name", "gpt2_pretrain", "--task_name", "clm", "--max_seq_length", "1024",
                     "--tokenizer_name", "gpt2", "--model_name", "gpt2", "--non_split_head",
                     "--skip_broadcast_patch", "--no_index_select_patch", "--config_name", f"{apps}/{GPT_CONFIG}"]
            compile_extra = ["--mac-v2", "--mac-human-decision",
                             f"{apps}/{GPT_DECISIONS}/mac_v2_overrides/gpt2_48_enc_full_recompute_training_"
                             f"spatialmapping_tiling16_clmerge_gm_{decisions}.json",
                             "--compiler-configs-file", f"{apps}/{GPT_DECISIONS}/compiler_configs/{configs}",
                             "--weight_decay", "0.1", "--max_grad_norm_clip", "1.0", "--num-tiles", "4",
                             "--enable-stochastic-rounding"]
            run_extra = ["--max_grad_norm_clip", "1.0", "--skip_checkpoint",
                         "--data_dir", str(data or "/data/ANL/ss1024"),
                         "--logging_steps", "1", "--max_steps", steps, "--learning_rate", "0.00025",
                         "--steps_this_run", steps]
        else:  # bert
            model = ["--model_name_or_path", "bert-large-uncased", "--tokenizer_name", "bert-large-uncased",
                     "--module_name", "mlm_ns", "--task_name", "mlm_ns", "--max_seq_length", "128",
                     "--non_split_head", "--dense_adam"]
            compile_extra = ["--compiler-configs-file",
                             f"{apps}/{BERT_DECISIONS}/compiler_configs/compiler_configs_bertlarge_sc_mlm_ml_perf_"
                             "fullfeature_macv2_gm_e2e.json", "--mac-human-decision",
                             f"{apps}/{BERT_DECISIONS}/mac_overrides/bertlarge_sc_training_mlm_ml_perf_fullfeature_"
                             "macv2.json", "--mac-v2", "--weight_decay", "0.01", "--max_grad_norm_clip", "1.0",
                             "--adam_beta2", "0.98", "--num-tiles", "4"]
            run_extra = ["--data_dir", str(data or "/data/ANL/wikicorpus_en/"), "--max_predictions_per_seq",
                         str(values.get("max_predictions", 20)), "--max_steps", steps, "--steps_this_run", steps,
                         "--logging_steps", "1", "--weight_decay", "0.01", "--learning_rate", "0.000175",
                         "--adam_beta2", "0.98", "--max_grad_norm_clip", "1.0", "--skip_checkpoint"]
        common = ["-b", batch, "--per_device_train_batch_size", batch, "--output_dir=hf_output",
                  "--overwrite_output_dir", "--do_train", "--cache_dir", "cache"]
        accum = int(values.get("grad_accum", 1) or 1)
        if req.workload == "gpt2" and accum > 1:  # Hugging Face's TrainingArguments flag (module docstring)
            common += ["--gradient_accumulation_steps", str(accum)]
        compile_ = [req.python, hook, "compile", *common, *model, *compile_extra, f"--pef-name={pef}",
                    "--output-folder=pef"]
        run = [*srun, req.python, hook, "run", *common, *model, *run_extra, f"--pef=pef/{pef}/{pef}.pef"]
        if parallel:
            compile_ += ["--data-parallel", "-ws", "2"]
            run += ["--data-parallel", "--reduce-on-rdu"]
        return [compile_, run]

    def adapter_args(self, req: LaunchRequest, values: dict[str, Any]) -> list[str]:
        tokens = tokens_per_sample(req.workload, values)
        out = ["--seq-len", str(tokens)] if tokens else []
        if req.options.get("device_model"):
            out += ["--device-model", str(req.options["device_model"])]
        return out


# ------------------------------------------------------------------------------------- adapter

_LOOP = re.compile(r"inner train loop time\s*:\s*(?P<t>[\d.]+) for (?P<epochs>\d+) epochs, number of global "
                   r"steps: (?P<steps>\d+), e2e samples_per_sec: (?P<rate>[\d.]+)")
_E2E = re.compile(r"e2e_latency:\s*(?P<t>[\d.]+) seconds, throughput:\s*(?P<rate>[\d.]+) samples/s, measured "
                  r"over (?P<iters>\d+) iterations")
_WORKERS = re.compile(r"combined throughput for (?P<n>\d+) workers")


def figures(text: str, seq_len: int) -> tuple[dict[str, Any], list[float], int, dict[str, Any]]:
    """orch's figures from either documented result format (the timed-run line wins)."""
    e2e = [m for m in map(_E2E.search, text.splitlines()) if m]
    if e2e:
        m = e2e[-1]
        seconds, rate, iters = float(m["t"]), float(m["rate"]), int(m["iters"])
        samples = rate * seconds
        workers = [int(w["n"]) for w in map(_WORKERS.search, text.splitlines()) if w]
        per_iter = [seconds / iters] * iters
        metrics = metricsdoc.step_figures(per_iter, samples / iters, seq_len)
        metrics["vendor_e2e_latency_s"] = seconds
        info = {"format": "e2e_latency/throughput (timed iterations after an initial run)",
                "workers": workers[-1] if workers else None}
        return metrics, per_iter, 1, info
    loops = [m for m in map(_LOOP.search, text.splitlines()) if m]
    if not loops:
        raise metricsdoc.AdapterError("neither an 'e2e_latency: ... throughput: ... samples/s' nor an "
                                      "'inner train loop time : ... e2e samples_per_sec' line in the output")
    times = [float(m["t"]) for m in loops]
    samples = sum(float(m["rate"]) * float(m["t"]) for m in loops)
    steps = max(int(m["steps"]) for m in loops)
    per_step = [max(times) / steps] * steps
    metrics = metricsdoc.step_figures(per_step, samples / steps, seq_len)
    metrics["vendor_mean_instance_samples_per_s"] = sum(float(m["rate"]) for m in loops) / len(loops)
    metrics["vendor_inner_loop_time_s"] = max(times)
    info = {"format": "inner train loop time (every step timed, no warm-up excluded)", "instances": len(loops),
            "epochs": int(loops[-1]["epochs"])}
    return metrics, per_step, 0, info


def build_parser() -> argparse.ArgumentParser:
    parser = metricsdoc.common_parser("python -m orchestrator.sites.vendors.sambanova",
                                          "SambaFlow application output -> orch metrics file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return metricsdoc.convert(argv, build_parser(), _document)


def _document(args: argparse.Namespace, text: str) -> dict[str, Any]:
    metrics, step_times, warm, info = figures(text, args.seq_len)
    vendor = {"tool": "SambaFlow application (compile, then run --pef)", "source": _PAGES, **info,
              "definitions": {
                  "vendor_mean_instance_samples_per_s": "mean of the instances' e2e samples_per_sec (the ALCF "
                                                        "page's figure); samples_per_s is their total",
                  "vendor_inner_loop_time_s": "the longest instance's inner train loop time (all steps)"}}
    return metricsdoc.document(args=args, device_type="rdu", metrics=metrics, warmup_steps=warm,
                               step_times=step_times, vendor=vendor)


if __name__ == "__main__":
    sys.exit(main())
