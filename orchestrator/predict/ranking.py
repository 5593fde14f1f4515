"""`orch predict`: the best parallel layout for a model on N devices of a site (time model in
orchestrator/predict/perfmodel/, efficiency factors from `orch calibrate` where fitted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.predict.campaign import TimeToTrain, time_to_train
from orchestrator.predict.layout_memory import layout_values, with_run_memory
from orchestrator.predict.model_shapes import ModelSpec, resolve_model
from orchestrator.predict.perfmodel.calibration import efficiency_for
from orchestrator.predict.perfmodel.layout import Layout
from orchestrator.predict.perfmodel.machine import Machine, machine_from_site
from orchestrator.predict.perfmodel.search import rank
from orchestrator.predict.perfmodel.transformer import Estimate, breakdown
from orchestrator.predict.whatif import WhatIf
from workloads.models.configs import SIZES, GPTConfig

COLUMNS = ["rank", "layout", "dp", "tp", "pp", "cp", "zero", "recompute", "step_s", "tokens_per_s",
           "memory_gb", "fits", "mfu", "gpt2", "runnable"]
# --tokens: the time to train the budget, in the table and in --json's time_to_train.
TRAIN_COLUMNS = ["train_days", "device_hours", "cost"]
Check = tuple[dict[str, Any] | None, str | None]


def gpt2_values(model: str, lay: Layout, precision: str, seq_len: int, micro_batches: int) -> Check:
    """The gpt2 sweep values that run layout ``lay`` (so that its prediction can be measured), or
    why the workload cannot run it: the workload's own layout check (workloads/layouts.py) decides."""
    return layout_check(SIZES[model], lay, precision, seq_len, micro_batches)


def layout_check(cfg: GPTConfig, lay: Layout, precision: str, seq_len: int, micro_batches: int) -> Check:
    """The gpt2 sweep values of layout ``lay`` for a model of shape ``cfg``, or why the workload's
    parallelism cannot run it (workloads/layouts.py, with the shape's layers and heads)."""
    from workloads import layouts

    if lay.tp2d:
        return None, "2D tensor parallel is in the time model, not in the gpt2 workload"
    values = layout_values(lay, micro_batches)
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
    spec: ModelSpec | None = None  # None: the gpt2 workload preset ``model``
    tokens: float | None = None  # --tokens: the budget to train
    price: tuple[float, str] | None = None  # the site's price a device-hour, and its currency
    what_if: WhatIf = field(default_factory=WhatIf)  # --what-if-nodes / --nvlink-domain
    profile_max_nodes: int = 0  # the profile's own cap and NVLink domain, beside the what-if's
    profile_domain: int = 0
    _checks: dict[int, Check] = field(default_factory=dict, repr=False)

    @property
    def workload_preset(self) -> bool:
        return self.spec is None or self.spec.workload_preset

    def runnable_check(self, e: Estimate) -> Check:
        """The workload's layout check of the estimate's layout for this shape (:func:`layout_check`),
        worked out once per layout (ranking, the table, its footer and --json all ask)."""
        found = self._checks.get(id(e))
        if found is None:
            cfg = SIZES[self.model] if self.spec is None else self.spec.config
            found = self._checks[id(e)] = layout_check(cfg, e.layout, self.precision, self.seq_len, e.micro_batches)
        return found

    def runnable(self, e: Estimate) -> bool:
        """Whether the gpt2 workload's parallelism runs the layout for this shape (for a shape
        that is no preset, the layout's; the model itself is not in the workload)."""
        return self.runnable_check(e)[0] is not None

    def gpt2(self, e: Estimate) -> Check:
        """How the gpt2 workload measures the estimate's layout, or why it cannot: a preset and a
        runnable layout (:func:`gpt2_values`)."""
        values, refusal = self.runnable_check(e)
        if values is not None and not self.workload_preset:
            return None, f"{self.model} is not a gpt2 workload preset (workloads/models/configs.py)"
        return values, refusal

    def trained(self, e: Estimate) -> TimeToTrain | None:
        if self.tokens is None:
            return None
        return time_to_train(self.tokens, e.step_s, global_batch=e.global_batch, seq_len=self.seq_len,
                             devices=self.devices, price_per_device_hour=self.price[0] if self.price else None)

    def rows(self) -> list[list[Any]]:
        out: list[list[Any]] = []
        for i, e in enumerate(self.estimates, 1):
            lay = e.layout
            row = [i, lay.name, lay.dp, lay.tp, lay.pp, lay.cp, lay.zero,
                   "yes" if lay.recompute else "no", round(e.step_s, 6), round(e.tokens_per_s, 1),
                   round(e.memory_gb, 2), "yes" if e.fits else "NO",
                   None if e.mfu is None else round(e.mfu, 3),
                   "yes" if self.gpt2(e)[0] is not None else "no", "yes" if self.runnable(e) else "no"]
            out.append(row + (self._train_cells(e) if self.tokens is not None else []))
        return out

    def _train_cells(self, e: Estimate) -> list[Any]:
        t = self.trained(e)
        assert t is not None
        return [round(t.days, 2), round(t.device_hours), None if t.cost is None else round(t.cost)]

    def breakdown_rows(self) -> list[list[Any]]:
        """rank, layout, step_s and the step's parts in seconds (``--breakdown``)."""
        return [[i, e.layout.name, round(e.step_s, 6), *(round(v, 6) for v in breakdown(e).values())]
                for i, e in enumerate(self.estimates, 1)]

    def _train_json(self, e: Estimate) -> dict[str, Any] | None:
        t = self.trained(e)
        if t is None:
            return None
        return {"tokens": self.tokens, "steps": t.steps, "hours": t.hours, "days": t.days,
                "device_hours": t.device_hours, "cost": t.cost, "currency": self.price[1] if self.price else None}

    def _layout_json(self, row: list[Any], e: Estimate) -> dict[str, Any]:
        return {**dict(zip(COLUMNS, row)), "runnable": self.runnable(e),
                "runnable_refusal": self.runnable_check(e)[1], "strategy": e.layout.strategy,
                "tp2d": e.layout.tp2d, "micro_batches": e.micro_batches, "bubble_s": e.bubble_s,
                "tp_comm_s": e.tp_comm_s, "dp_comm_exposed_s": e.dp_comm_exposed_s, "breakdown": breakdown(e),
                "time_to_train": self._train_json(e), "memory_parts_gb": e.memory_parts,
                "memory_tensors_gb": e.memory_parts.get("tensors"), "memory_from": e.memory_from,
                **dict(zip(("gpt2_values", "gpt2_refusal"), self.gpt2(e)))}

    def as_json(self) -> dict[str, Any]:
        m = self.machine
        eff = m.for_precision(self.precision).efficiency  # as the estimates used it
        cfg = SIZES[self.model] if self.spec is None else self.spec.config
        return {
            "model": self.model, "site": m.name, "device": m.device_model, "devices": self.devices,
            "shape": {"layers": cfg.n_layer, "hidden": cfg.n_embd, "heads": cfg.n_head, "vocab": cfg.vocab_size,
                      "seq": self.seq_len, "workload_preset": self.workload_preset},
            "precision": self.precision, "batch_size_per_device": self.batch_size, "seq_len": self.seq_len,
            "global_batch": self.batch_size * self.devices, "memory_gb_per_device": m.memory_gb,
            "tokens": self.tokens,
            "price_per_device_hour": self.price[0] if self.price else None,
            "currency": self.price[1] if self.price else None,
            "efficiency": {"matmul": eff.matmul, "memory": eff.memory, "network": eff.network,
                           "op_overhead_us": eff.op_overhead_us, "step_overhead_ms": eff.step_overhead_ms,
                           "source": eff.source},
            "notes": list(m.notes),
            "what_if": self.what_if.as_json(self.profile_max_nodes, self.profile_domain),
            "layouts": [self._layout_json(row, e) for row, e in zip(self.rows(), self.estimates)],
        }


def _site_checks(site: Any, devices: int, batch_size: int, seq_len: int, micro_batch: int | None,
                 precision: str | None, what_if: WhatIf | None = None) -> str:
    """One-line errors for what the site (or the what-if's node count) cannot hold; the precision."""
    device = site.device
    if devices < 1:
        raise UserError(f"--devices: expected a whole number >= 1, got {devices}")
    what_if = what_if or WhatIf()
    nodes = what_if.max_nodes(site.max_nodes)
    capacity = device.per_node * nodes
    if devices > capacity:
        if what_if.nodes is not None:
            raise UserError(f"--devices {devices}: --what-if-nodes {nodes} holds at most {capacity} "
                            f"({nodes} node(s) x {device.per_node} {device.model})")
        raise UserError(f"--devices {devices}: {site.name} has at most {capacity} "
                        f"({site.max_nodes} node(s) x {device.per_node} {device.model}); "
                        f"--what-if-nodes {-(-devices // device.per_node)} predicts it as a what-if")
    if devices > device.per_node and devices % device.per_node:
        raise UserError(f"--devices {devices}: does not fill whole nodes of {device.per_node} {device.model}")
    if batch_size < 1 or seq_len < 1 or (micro_batch is not None and micro_batch < 1):
        raise UserError("--batch-size, --seq-len and --micro-batch must be >= 1")
    if precision is None:
        precision = "bf16" if "bf16" in device.precisions else device.precisions[0]
    if precision not in device.precisions:
        raise UserError(f"--precision {precision}: {device.model} on {site.name} runs "
                        f"{', '.join(device.precisions)}")
    return precision


def _machine(site: Any, state_dir: Path | None) -> Machine:
    try:
        machine = machine_from_site(site)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    fitted = efficiency_for(machine, state_dir)
    return machine if fitted is None else machine.with_efficiency(fitted)


def _price(site: Any) -> tuple[float, str] | None:
    price = site.price
    return None if price is None else (price.device_hour(site.device.per_node), price.currency)


def predict(model: str | None, devices: int, site_name: str, *, precision: str | None, batch_size: int,
            seq_len: int | None, micro_batch: int | None = None, shape: dict[str, int | None] | None = None,
            tokens: float | None = None, runnable_only: bool = False, sites_dirs: list[Path] | None = None,
            state_dir: Path | None = None, what_if: WhatIf | None = None) -> Prediction:
    """Every layout of ``devices`` devices on ``site_name`` for ``model`` (a gpt2 preset or one of
    model_shapes.PREDICT_PRESETS) or the custom ``shape`` (layers, hidden, heads, vocab), ranked:
    those that fit first, of them those the gpt2 workload's parallelism runs, fastest first.
    ``runnable_only``: only the layouts it runs. ``what_if``: more nodes than the profile has, another
    NVLink domain size (orchestrator/predict/whatif.py; labelled in the header and --json)."""
    from orchestrator.sites.profiles import load_site

    what_if = what_if or WhatIf()
    spec, seq = resolve_model(model, shape or {}, seq_len)
    site = load_site(site_name, sites_dirs)
    precision = _site_checks(site, devices, batch_size, seq, micro_batch, precision, what_if)
    profiled = _machine(site, state_dir)
    machine = what_if.machine(profiled)
    model_shape = spec.shape(seq)
    estimates = rank(model_shape, machine, devices, precision=precision, batch_size=batch_size,
                     micro_batch=micro_batch)
    # Memory: the run's own model, as `orch plan` predicts it (orchestrator/predict/layout_memory.py);
    # a shape that is no gpt2 preset has no program to trace: the formula with its own shape.
    preset = spec.workload_preset
    estimates = with_run_memory(
        estimates, machine, model=spec.name, precision=precision, seq_len=seq,
        gpt2=lambda e: gpt2_values(spec.name, e.layout, precision, seq, e.micro_batches) if preset else (None, None),
        config=None if preset else spec.config, untraced=spec.memory_from or "formula")
    if not estimates:
        raise UserError(f"no layout of {devices} devices for {spec.name}: tensor parallel must divide the hidden "
                        f"size {model_shape.hidden}, context parallel the sequence {seq}, pipeline stages "
                        f"at most the {model_shape.layers} layers")
    out = Prediction(machine, spec.name, devices, precision, batch_size, seq, estimates, spec=spec, tokens=tokens,
                     price=_price(site), what_if=what_if, profile_max_nodes=site.max_nodes,
                     profile_domain=profiled.fast_domain)
    # Layouts a campaign can run before those only the time model has, among those that fit alike.
    out.estimates = sorted(estimates, key=lambda e: (not e.fits, not out.runnable(e), round(e.step_s, 9),
                                                     e.memory_gb))
    if runnable_only:
        out.estimates = [e for e in out.estimates if out.runnable(e)]
        if not out.estimates:
            raise UserError(f"--runnable: the gpt2 workload runs none of the {len(estimates)} layouts of "
                            f"{devices} devices for {spec.name} (drop --runnable to see why)")
    return out


def header(p: Prediction) -> list[str]:
    m = p.machine
    e = m.for_precision(p.precision).efficiency  # the matmul fraction of this device and precision
    label = p.what_if.line(p.profile_max_nodes, p.profile_domain)
    lines = [label] if label else []
    lines += [f"{p.model} on {p.devices} x {m.device_model} ({m.name}), {p.precision}, seq {p.seq_len}, "
              f"global batch {p.batch_size * p.devices} ({p.batch_size} a device)",
              f"efficiency: matmul {e.matmul:.2f}, memory {e.memory:.2f}, network {e.network:.2f}, "
              f"{e.op_overhead_us:g} us an op ({e.source}); network: {m.fast_domain} devices at {m.fast_gbs:g} GB/s, "
              f"{m.node_nic_gbs if m.node_nic_gbs is not None else m.inter_node_gbs * m.per_node:g} GB/s "
              f"a node between them (all its NICs, as NCCL's rings cross nodes)"]
    lines += [f"note: {note}" for note in m.notes]
    lines += _shape_lines(p) + _train_lines(p)
    fitting = sum(e.fits for e in p.estimates)
    lines.append(f"{len(p.estimates)} layouts, {fitting} fit in {m.memory_gb:g} GB" if m.memory_gb
                 else f"{len(p.estimates)} layouts")
    return lines


def _shape_lines(p: Prediction) -> list[str]:
    """The shape of a model that is no gpt2 preset, and what that means for memory and runnable."""
    if p.spec is None or p.spec.workload_preset:
        return []
    cfg = p.spec.config
    params = p.spec.shape(p.seq_len).params
    return [f"shape: {cfg.n_layer} layers, hidden {cfg.n_embd}, {cfg.n_head} heads, vocab {cfg.vocab_size} "
            f"({params / 1e9:.1f}B parameters); not a gpt2 workload preset: memory from the workload's formula "
            "(no trace), runnable = the workload's parallelism runs the layout"]


def _train_lines(p: Prediction) -> list[str]:
    if p.tokens is None:
        return []
    per_step = p.batch_size * p.devices * p.seq_len
    price = (f"at {p.price[0]:g} {p.price[1]} a device-hour (the site's price)" if p.price
             else "no cost: the site profile has no price")
    return [f"time to train {p.tokens:.4g} tokens: {per_step:,} tokens a step (global batch x seq); {price}"]


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
