"""GroqCard (GroqChip): GroqFlow's proof points, and their adapter.

Excerpts reproduced from public documents (command lines and the output read):

- ALCF AI Testbed user guide, Groq "Running a Model/Program", github.com/argonne-lcf/user-guides
  ``docs/ai-testbed/groq/running-a-model-or-program.md`` (commit 7d04a3f9): ``conda activate
  groqflow``, ``cd ~/groqflow/proof_points/...``, ``python minilmv2.py`` in a script submitted with
  ``qsub -l select=1,place=excl``; ``index.md``: each GroqCard holds one GroqChip with 230 MB of
  on-chip memory, 188 TFLOP/s FP16 (750 TOPS INT8) at 900 MHz; 9 GroqNodes of 8 cards.
- GroqFlow, github.com/groq/groqflow (commit d7fef7e7): ``proof_points/computer_vision/resnet50/
  resnet50.py`` and ``proof_points/natural_language_processing/distilbert/distilbert.py`` (batch 1;
  DistilBERT sequence 128), ``demo_helpers/demo_helpers/compute_performance.py`` (the table: "end-to-end
  latency (ms)" is ``groq_model.benchmark().latency``, "end-to-end IPS" = batch / that latency,
  "on-chip latency (ms)" is ``estimate_performance().compute_latency``).
- ALCF AI-science training series, github.com/argonne-lcf/ai-science-training-series
  ``old/2024-Spring/07_AITestbeds/Groq/resnet50.md``: a ResNet-50 run's output on the ALCF
  GroqRack (build steps including "Converting to FP16", then the table).

Not verified here (no GroqCard is reachable): how many inferences GroqFlow's ``benchmark()`` times
(orch records its latency as one timed figure, not per-inference times).

Definitions: the proof points run batch 1 and print GroqFlow's end-to-end latency; orch reports
``samples_per_s`` = the table's end-to-end IPS (1 / latency at batch 1) and ``latency_s`` =
``step_time_s`` = that latency; the on-chip (compute-only) figures are kept as
``vendor_on_chip_latency_s`` and ``vendor_on_chip_samples_per_s``. The CPU row is not used.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Mapping, Sequence

from orchestrator.sites.launchers import LAUNCHERS, LaunchRequest
from orchestrator.sites.vendors import metricsdoc
from orchestrator.sites.vendors.base import Model, VendorRunner

_SOURCE = "github.com/groq/groqflow proof_points (commit d7fef7e7)"
PROOF_POINTS = {
    "resnet50": "proof_points/computer_vision/resnet50/resnet50.py",
    "distilbert": "proof_points/natural_language_processing/distilbert/distilbert.py",
}


@LAUNCHERS.register("groqflow")
class GroqRunner(VendorRunner):
    """``python <groqflow>/proof_points/.../<model>.py`` in the job (one process; GroqFlow picks the chips)."""

    vendor = "GroqCard"
    adapter = "orchestrator.sites.vendors.groq"
    check_case = ("resnet50", 1, None, (("mode", "inference"), ("size", "full")))
    vendor_strategy = None  # one GroqCard per run (model_check): nothing is spread
    parallelism = "one GroqCard per run"
    models = {
        "resnet50": Model("GroqFlow proof point resnet50.py (inference, batch 1)", _SOURCE,
                          fixed={"mode": "inference", "size": "full"}, precisions=("fp16",)),
        "distilbert": Model("GroqFlow proof point distilbert.py (inference, batch 1, sequence 128)", _SOURCE,
                            fixed={"size": "full"}, precisions=("fp16",)),
    }

    def model_check(self, workload: str, model: Model, precision: str, values: Mapping[str, Any]) -> str | None:
        if int(values.get("batch_size") or 1) != 1:
            return f"{self.vendor}: {model.app} compiles batch 1, not {values.get('batch_size')}"
        if workload == "distilbert" and values.get("seq_len") not in (None, 128):
            return f"{self.vendor}: {model.app} compiles sequence 128, not {values.get('seq_len')}"
        if workload == "resnet50" and int(values.get("image_size") or 0) not in (0, 224):
            return f"{self.vendor}: {model.app} compiles 224x224 images, not {values.get('image_size')}"
        if int(values.get("devices", 1)) != 1:
            return f"{self.vendor}: {model.app} runs on one GroqChip (GroqFlow chooses), not {values.get('devices')}"
        return None

    def tool(self, req: LaunchRequest, values: dict[str, Any]) -> list[list[str]]:
        root = str(req.options.get("groqflow", "groqflow"))
        return [[req.python, f"{root}/{PROOF_POINTS[req.workload]}"]]

    def adapter_args(self, req: LaunchRequest, values: dict[str, Any]) -> list[str]:
        out = ["--warmup", "0"]
        if req.options.get("device_model"):
            out += ["--device-model", str(req.options["device_model"])]
        return out


# ------------------------------------------------------------------------------------- adapter


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """The PrettyTable compute_performance() prints, as {source: {column: cell}}."""
    header: list[str] | None = None
    rows: dict[str, dict[str, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "Source" in cells:
            header = cells
        elif header and len(cells) == len(header):
            rows[cells[0]] = dict(zip(header, cells))
    return rows


def _number(cell: str | None) -> float | None:
    try:
        return float(str(cell).rstrip("%"))
    except (TypeError, ValueError):
        return None


def figures(text: str) -> tuple[dict[str, Any], list[float]]:
    row = table_rows(text).get("groq")
    if row is None:
        raise metricsdoc.AdapterError("no '| groq |' row of GroqFlow's performance table in the output")
    latency_ms = _number(row.get("end-to-end latency (ms)"))
    ips = _number(row.get("end-to-end IPS"))
    if not latency_ms or not ips:
        raise metricsdoc.AdapterError("the groq row has no end-to-end latency and IPS")
    on_chip_ms = _number(row.get("on-chip latency (ms)"))
    metrics: dict[str, Any] = {
        "samples_per_s": ips,
        "latency_s": latency_ms / 1000.0,
        "step_time_s": latency_ms / 1000.0,
        "vendor_on_chip_latency_s": on_chip_ms / 1000.0 if on_chip_ms else None,
        "vendor_on_chip_samples_per_s": _number(row.get("on-chip IPS")),
        "vendor_accuracy_percent": _number(next((v for k, v in row.items() if k not in (
            "Source", "end-to-end latency (ms)", "end-to-end IPS", "on-chip latency (ms)", "on-chip IPS")), None)),
    }
    return metrics, [latency_ms / 1000.0]


def build_parser() -> argparse.ArgumentParser:
    parser = metricsdoc.common_parser("python -m orchestrator.sites.vendors.groq",
                                          "GroqFlow proof point output -> orch metrics file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return metricsdoc.convert(argv, build_parser(), _document)


def _document(args: argparse.Namespace, text: str) -> dict[str, Any]:
    metrics, step_times = figures(text)
    vendor = {"tool": "GroqFlow proof point", "source": _SOURCE,
              "definitions": {"latency_s": "GroqFlow benchmark() end-to-end latency at batch 1",
                              "vendor_on_chip_latency_s": "GroqFlow estimate_performance() compute latency"}}
    return metricsdoc.document(args=args, device_type="lpu", metrics=metrics, warmup_steps=0,
                               step_times=step_times, vendor=vendor, params={"batch_size": 1})


if __name__ == "__main__":
    sys.exit(main())
