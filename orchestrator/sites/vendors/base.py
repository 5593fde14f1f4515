"""What every vendor runner shares: the registry, the run's values, the three script steps.

A vendor runner is a :class:`orchestrator.sites.launchers.Launcher` (registered the same way, with
``@LAUNCHERS.register("<launcher.name>")``; this base class is not registered) for a system
whose accelerators are programmed through the vendor's own tool, not through orch's PyTorch
workloads: the Cerebras model zoo, SambaNova's SambaFlow apps, Graphcore's PopTorch examples,
GroqFlow. For a run it renders, in order:

1. set-up steps the vendor's flow needs (a params file for the model zoo, a compile step);
2. the vendor's command line, as the vendor's public documentation gives it, started through
   ``python -m orchestrator.sites.vendors.capture --log vendor.log -- ...`` so that what the tool
   prints is kept in a file as well as in the job's output;
3. the adapter: ``python -m orchestrator.sites.vendors.<vendor> --from vendor.log --output <metrics>
   ...``, which reads what the tool printed and writes orch's metrics file (``orch.metrics/1``)
   with orch's definitions (see :mod:`orchestrator.sites.vendors.metricsdoc`).

Which workloads, precisions and parameter values a vendor can run is each runner's
:meth:`VendorRunner.supports`; :func:`orchestrator.plan.resolve.resolve` asks it once and keeps a
run it refuses as skipped with the reason.

Strategies: the vendor's tool spreads a run over its devices by its own scheme (SambaFlow's
``--data-parallel --reduce-on-rdu``, the model zoo's ``--num_csx``, PopTorch's pipelined replicas),
none of orch's PyTorch strategies (ddp, fsdp-*, zero1-3). A runner declares the orch strategies it
honours (:attr:`VendorRunner.honours_strategies`, none for every vendor here) and the name of its
own scheme (:attr:`VendorRunner.vendor_strategy`, e.g. ``vendor-dp``); a run that asks another
strategy is skipped at plan with the reason, and a planned vendor run is recorded with the
strategy the runner applies (:func:`recorded_strategy`), never with one it does not.

Everything here is standard-library Python (plus ``workloads.registry``, pure Python): the
adapter modules run on the vendor's login or compute node inside the vendor's own virtual
environment, which has neither torch nor orch's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from orchestrator.sites.launchers import LAUNCHERS, Launcher, LaunchRequest
from workloads import registry

LOG = "vendor.log"  # what the vendor's tool printed (relative to the run directory)
CAPTURE = "orchestrator.sites.vendors.capture"
# Parameters no vendor run is skipped for: a label, and the warm-up and timed step counts (a
# runner maps them onto the vendor's step count where its tool takes one; else the adapter
# applies its own warm-up rule to the steps the tool ran, see each vendor module).
NEUTRAL = frozenset({"tag", "warmup", "iters"})


@dataclass(frozen=True)
class Model:
    """One of the vendor's documented applications and what of a run it can honour.

    ``honours``: the workload parameters the vendor command carries over (any other parameter
    must keep its default, or the run is skipped with the reason). ``fixed``: parameters the
    vendor's example fixes, with the only value it runs (e.g. GroqFlow's batch 1).
    """

    app: str  # what the vendor calls it (for reasons and the metrics' ``vendor`` block)
    source: str  # the public page the command line comes from
    honours: frozenset[str] = frozenset()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    precisions: tuple[str, ...] = ()
    note: str = ""


def run_values(workload: str, args: list[str]) -> dict[str, Any]:
    """The run's values, read back from the workload command line orch built for it.

    ``args`` is :func:`orchestrator.plan.resolve.workload_args`: ``--flag value`` pairs only. The
    workload's registry entry maps each flag back to its parameter (and type); the harness
    flags (``--precision``, ``--device``, ``--peak-tflops``, ``--output``) keep their names.
    """
    entry = registry.get(workload)
    by_flag = {p.flag: p for p in entry.params + entry.axis_params()}
    values: dict[str, Any] = dict(entry.defaults())
    for name in entry.axes:
        values.setdefault(name, entry.axis_defaults.get(name))
    for flag, text in zip(args[::2], args[1::2]):
        param = by_flag.get(flag)
        if param is None:
            values[flag.lstrip("-").replace("-", "_")] = text
        elif param.type is bool:
            values[param.name] = text.lower() in ("true", "1", "yes", "on")
        else:
            values[param.name] = param.type(text)
    return values


class VendorRunner(Launcher):
    """A launcher that runs the vendor's own application for a workload, then the adapter."""

    vendor: ClassVar[str] = ""  # the system, in words
    adapter: ClassVar[str] = ""  # module run as ``python -m`` on the node after the tool
    models: ClassVar[dict[str, Model]] = {}
    single_process = True
    max_nodes: ClassVar[int | None] = 1
    # A run the system can do, for `orch sites check` and the golden scripts: (workload, batch
    # size, sequence length, parameters); orch's own launchers use a GEMM instead.
    check_case: ClassVar[tuple[str, int | None, int | None, tuple[tuple[str, Any], ...]]] = ("gemm", None, None, ())
    # orch strategies (the sweep's ``strategy`` axis) the vendor's tool honours: none here, since
    # every vendor runs its own scheme; a run asking one it does not honour is skipped at plan.
    honours_strategies: ClassVar[frozenset[str]] = frozenset()
    # The vendor's own scheme, by the name the results record in their strategy column, and in words.
    vendor_strategy: ClassVar[str | None] = "vendor-dp"
    parallelism: ClassVar[str] = "the vendor's own data parallelism"

    def applied_strategy(self, workload: str, devices: int) -> str | None:
        """The strategy this runner applies to a run (what the results record): the vendor's own
        scheme, at every device count and for every workload, so that a scaling series from one
        device up stays one group of the ``scaling`` view."""
        return self.vendor_strategy

    def strategy_refusal(self, strategy: str | None) -> str | None:
        """Why a run asking ``strategy`` cannot run here (None: unset, or one the runner honours)."""
        if strategy in (None, "none") or strategy in self.honours_strategies:
            return None
        return (f"{self.vendor}: the vendor's tool runs {self.parallelism}, not orch's strategy {strategy}; "
                f"leave strategy unset for this system (its runs are recorded as {self.vendor_strategy})")

    # ---------------------------------------------------------------- what can run
    def supports(self, workload: str, precision: str, values: Mapping[str, Any]) -> str | None:
        """Why the vendor's tool cannot run this workload/precision/parameters (None: it can)."""
        model = self.models.get(workload)
        if model is None:
            known = ", ".join(sorted(self.models)) or "none"
            return (f"{self.vendor}: no documented vendor application for workload {workload} "
                    f"(orch runs {known} here through the vendor's tool)")
        refused = self.strategy_refusal(values.get("strategy"))
        if refused:
            return refused
        if model.precisions and precision not in model.precisions:
            return (f"{self.vendor}: {model.app} runs {', '.join(model.precisions)}, not {precision}")
        entry = registry.get(workload)
        defaults = entry.defaults()
        for name, value in sorted(values.items()):
            if name in model.fixed:
                if value != model.fixed[name]:
                    return (f"{self.vendor}: {model.app} runs only {name}={model.fixed[name]} "
                            f"(the vendor's example), not {value}")
                continue
            if name in model.honours or name in NEUTRAL or name not in defaults or name == "strategy":
                continue
            if value != defaults[name]:
                return (f"{self.vendor}: {model.app} has no equivalent of {name}={value} "
                        f"(the vendor's example keeps its own)")
        return self.model_check(workload, model, precision, values)

    def model_check(self, workload: str, model: Model, precision: str, values: Mapping[str, Any]) -> str | None:
        """Vendor-specific rules (device counts, sizes); None when the run can go."""
        return None

    # ---------------------------------------------------------------- what is rendered
    def values(self, req: LaunchRequest) -> dict[str, Any]:
        values = run_values(req.workload, req.args)
        values["devices"] = req.devices
        return values

    def tool(self, req: LaunchRequest, values: dict[str, Any]) -> list[list[str]]:
        """The vendor's commands: set-up steps, then the one whose output the adapter reads (last)."""
        raise NotImplementedError

    def adapter_args(self, req: LaunchRequest, values: dict[str, Any]) -> list[str]:
        """Adapter flags beyond --from/--output/--workload/--precision/--devices."""
        return []

    def check(self, req: LaunchRequest) -> str | None:
        reason = super().check(req)
        if reason:
            return reason
        values = self.values(req)
        # The strategy the run asked (its --strategy flag), not the workload's default for it.
        asked = dict(zip(req.args[::2], req.args[1::2])).get("--strategy")
        return self.supports(req.workload, str(values.get("precision", "")), {**values, "strategy": asked})

    def pre_steps(self, req: LaunchRequest) -> list[list[str]]:
        values = self.values(req)
        *setup, main = self.tool(req, values)
        return [*setup, [req.python, "-m", CAPTURE, "--log", LOG, "--", *main]]

    def argv(self, req: LaunchRequest) -> list[str]:
        values = self.values(req)
        output = str(values.get("output", "metrics.json"))
        return [req.python, "-m", self.adapter, "--from", LOG, "--output", output,
                "--workload", req.workload, "--precision", str(values.get("precision")),
                "--devices", str(req.devices), *self.adapter_args(req, values)]


def tokens_per_sample(workload: str, values: Mapping[str, Any]) -> int | None:
    """Tokens in one sample of a language model (its sequence length); None for other models."""
    if workload in ("gpt2", "genslm", "transformer_block", "bert", "distilbert"):
        seq = values.get("seq_len")
        return int(seq) if seq else None
    return None


def spec_values(spec: Any) -> dict[str, Any]:
    """A run spec's values as :meth:`VendorRunner.supports` takes them (defaults filled in)."""
    values: dict[str, Any] = {**registry.get(spec.workload).defaults(), **dict(spec.params)}
    values.update(precision=spec.precision, devices=spec.devices, strategy=spec.strategy,
                  batch_size=spec.batch_size, seq_len=spec.seq_len)
    return values


def recorded_strategy(launcher_name: str | None, workload: str, devices: int, strategy: str | None) -> str | None:
    """The strategy a run records: the vendor runner's own scheme where a vendor runner places it
    (see :meth:`VendorRunner.applied_strategy`), else the one the run asked."""
    runner = runner_for(launcher_name) if launcher_name else None
    if runner is None:
        # A sweep without `strategy:` runs the program's default (gpt2: ddp): recorded as such, so
        # the run compares with those that name it (issue 53).
        known = registry.WORKLOADS.get(workload)
        return strategy if strategy is not None or known is None else known.axis_defaults.get("strategy")
    return runner.applied_strategy(workload, devices)


def check_case(launcher_name: str) -> tuple[str, int | None, int | None, tuple[tuple[str, Any], ...]] | None:
    """The vendor runner's representative run (see :attr:`VendorRunner.check_case`); None for orch's launchers."""
    runner = runner_for(launcher_name)
    return runner.check_case if runner is not None else None


def runner_for(launcher_name: str) -> VendorRunner | None:
    """The vendor runner registered as ``launcher_name``, or None for orch's own launchers (and
    for a name no launcher has)."""
    cls = LAUNCHERS.get(launcher_name) if launcher_name in LAUNCHERS else None
    if cls is not None and issubclass(cls, VendorRunner):
        return cls()
    return None


def runners() -> dict[str, type[VendorRunner]]:
    """Every registered vendor runner (that has an adapter), by launcher name."""
    return {name: cls for name, cls in LAUNCHERS.items() if issubclass(cls, VendorRunner) and cls.adapter}
