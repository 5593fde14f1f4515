"""`orch predict`: the best parallel layout for a model on N devices of a site (time model in
orchestrator/predict/perfmodel/, efficiency factors from `orch calibrate` where fitted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.predict.layout_memory import layout_values, with_run_memory
from orchestrator.predict.perfmodel.calibration import efficiency_for
from orchestrator.predict.perfmodel.layout import Layout
from orchestrator.predict.perfmodel.machine import Machine, machine_from_site
from orchestrator.predict.perfmodel.search import gpt_shape, rank
from orchestrator.predict.perfmodel.transformer import Estimate

COLUMNS = ["rank", "layout", "dp", "tp", "pp", "cp", "zero", "recompute", "step_s", "tokens_per_s",
           "memory_gb", "fits", "mfu", "gpt2"]


def gpt2_values(model: str, lay: Layout, precision: str, seq_len: int,
                micro_batches: int) -> tuple[dict[str, Any] | None, str | None]:
    """The gpt2 sweep values that run layout ``lay`` (so that its prediction can be measured), or
    why the workload cannot run it: the workload's own layout check (workloads/layouts.py) decides."""
    from workloads import layouts
    from workloads.models.configs import SIZES

    if lay.tp2d:
        return None, "2D tensor parallel is in the time model, not in the gpt2 workload"
    values = layout_values(lay, micro_batches)
    cfg = SIZES[model]
    try:
        layouts.resolve({**values, "precision": precision, "seq_len": seq_len}, lay.devices,
                        n_layer=cfg.n_layer, n_head=cfg.n_head)
    except layouts.LayoutError as exc:
        return None, str(exc)
    return values, None


@dataclass
class Prediction:
    machine: Machine
    model: str
    devices: int
    precision: str
    batch_size: int
    seq_len: int
    estimates: list[Estimate]
    _gpt2: dict[int, tuple[dict[str, Any] | None, str | None]] = field(default_factory=dict, repr=False)

    def gpt2(self, e: Estimate) -> tuple[dict[str, Any] | None, str | None]:
        """How the gpt2 workload runs the estimate's layout, or why it cannot (:func:`gpt2_values`),
        worked out once per layout (the table, its footer and --json all ask)."""
        found = self._gpt2.get(id(e))
        if found is None:
            found = self._gpt2[id(e)] = gpt2_values(self.model, e.layout, self.precision, self.seq_len,
                                                    e.micro_batches)
        return found

    def rows(self) -> list[list[Any]]:
        out: list[list[Any]] = []
        for i, e in enumerate(self.estimates, 1):
            lay = e.layout
            out.append([i, lay.name, lay.dp, lay.tp, lay.pp, lay.cp, lay.zero,
                        "yes" if lay.recompute else "no", round(e.step_s, 6), round(e.tokens_per_s, 1),
                        round(e.memory_gb, 2), "yes" if e.fits else "NO",
                        None if e.mfu is None else round(e.mfu, 3),
                        "yes" if self.gpt2(e)[0] is not None else "no"])
        return out

    def as_json(self) -> dict[str, Any]:
        m = self.machine
        eff = m.for_precision(self.precision).efficiency  # as the estimates used it
        return {
            "model": self.model, "site": m.name, "device": m.device_model, "devices": self.devices,
            "precision": self.precision, "batch_size_per_device": self.batch_size, "seq_len": self.seq_len,
            "global_batch": self.batch_size * self.devices, "memory_gb_per_device": m.memory_gb,
            "efficiency": {"matmul": eff.matmul, "memory": eff.memory, "network": eff.network,
                           "op_overhead_us": eff.op_overhead_us, "step_overhead_ms": eff.step_overhead_ms,
                           "source": eff.source},
            "notes": list(m.notes),
            "layouts": [{**dict(zip(COLUMNS, row)), "strategy": e.layout.strategy, "tp2d": e.layout.tp2d,
                         "micro_batches": e.micro_batches, "bubble_s": e.bubble_s, "tp_comm_s": e.tp_comm_s,
                         "dp_comm_exposed_s": e.dp_comm_exposed_s, "memory_parts_gb": e.memory_parts,
                         "memory_tensors_gb": e.memory_parts.get("tensors"), "memory_from": e.memory_from,
                         **dict(zip(("gpt2_values", "gpt2_refusal"), self.gpt2(e)))}
                        for row, e in zip(self.rows(), self.estimates)],
        }


def predict(model: str, devices: int, site_name: str, *, precision: str | None, batch_size: int, seq_len: int,
            micro_batch: int | None = None, sites_dirs: list[Path] | None = None,
            state_dir: Path | None = None) -> Prediction:
    """Every layout of ``devices`` devices for gpt2 preset ``model`` on ``site_name``, ranked."""
    from orchestrator.sites.profiles import load_site
    from workloads.models.configs import SIZES

    if model not in SIZES:
        raise UserError(f"unknown model {model!r} (known: {', '.join(SIZES)})")
    site = load_site(site_name, sites_dirs)
    device = site.device
    if devices < 1:
        raise UserError(f"--devices: expected a whole number >= 1, got {devices}")
    capacity = device.per_node * site.max_nodes
    if devices > capacity:
        raise UserError(f"--devices {devices}: {site.name} has at most {capacity} "
                        f"({site.max_nodes} node(s) x {device.per_node} {device.model})")
    if devices > device.per_node and devices % device.per_node:
        raise UserError(f"--devices {devices}: does not fill whole nodes of {device.per_node} {device.model}")
    if batch_size < 1 or seq_len < 1 or (micro_batch is not None and micro_batch < 1):
        raise UserError("--batch-size, --seq-len and --micro-batch must be >= 1")
    if precision is None:
        precision = "bf16" if "bf16" in device.precisions else device.precisions[0]
    if precision not in device.precisions:
        raise UserError(f"--precision {precision}: {device.model} on {site.name} runs "
                        f"{', '.join(device.precisions)}")
    try:
        machine = machine_from_site(site)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    fitted = efficiency_for(machine, state_dir)
    if fitted is not None:
        machine = machine.with_efficiency(fitted)
    shape = gpt_shape(model, seq_len)
    estimates = rank(shape, machine, devices, precision=precision, batch_size=batch_size, micro_batch=micro_batch)
    # Memory: the run's own model, as `orch plan` predicts it (orchestrator/predict/layout_memory.py).
    estimates = with_run_memory(estimates, machine, model=model, precision=precision, seq_len=seq_len,
                                gpt2=lambda e: gpt2_values(model, e.layout, precision, seq_len, e.micro_batches))
    if not estimates:
        raise UserError(f"no layout of {devices} devices for {model}: tensor parallel must divide the hidden "
                        f"size {shape.hidden}, context parallel the sequence {seq_len}, pipeline stages "
                        f"at most the {shape.layers} layers")
    return Prediction(machine, model, devices, precision, batch_size, seq_len, estimates)


def header(p: Prediction) -> list[str]:
    m = p.machine
    e = m.for_precision(p.precision).efficiency  # the matmul fraction of this device and precision
    lines = [f"{p.model} on {p.devices} x {m.device_model} ({m.name}), {p.precision}, seq {p.seq_len}, "
             f"global batch {p.batch_size * p.devices} ({p.batch_size} a device)",
             f"efficiency: matmul {e.matmul:.2f}, memory {e.memory:.2f}, network {e.network:.2f}, "
             f"{e.op_overhead_us:g} us an op ({e.source}); network: {m.fast_domain} devices at {m.fast_gbs:g} GB/s, "
             f"{m.node_nic_gbs if m.node_nic_gbs is not None else m.inter_node_gbs * m.per_node:g} GB/s "
             f"a node between them (all its NICs, as NCCL's rings cross nodes)"]
    lines += [f"note: {note}" for note in m.notes]
    fitting = sum(e.fits for e in p.estimates)
    lines.append(f"{len(p.estimates)} layouts, {fitting} fit in {m.memory_gb:g} GB" if m.memory_gb
                 else f"{len(p.estimates)} layouts")
    return lines


def footer(p: Prediction, shown: int) -> list[str]:
    """How to measure the best layout the gpt2 workload runs, and why the others (among the first
    ``shown``) are the model's alone."""
    lines: list[str] = []
    best = next(((i, v) for i, e in enumerate(p.estimates, 1) if e.fits and (v := p.gpt2(e)[0]) is not None), None)
    if best is not None:
        i, values = best
        grid = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items())
        lines.append(f"measure layout {i} with the gpt2 workload: grid {{model: {p.model}, devices: {p.devices}, "
                     f"precision: {p.precision}, seq_len: {p.seq_len}, {grid}}}")
    why: dict[str, list[int]] = {}
    for i, e in enumerate(p.estimates[:shown], 1):
        refusal = p.gpt2(e)[1]
        if refusal is not None:
            why.setdefault(refusal, []).append(i)
    for refusal, ranks in why.items():
        listed = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
        lines.append(f"gpt2 cannot run layout(s) {listed} (the model's alone): {refusal}")
    return lines
