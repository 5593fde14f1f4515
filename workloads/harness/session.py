"""One workload run: command line, device, precision, process group, results.

A workload's ``main`` is ``run_workload(name, body, argv)``; ``body`` gets a
:class:`Session`, times its steps with it and calls :meth:`Session.finish` with
its own metrics. The session adds the step-time statistics, peak memory, the
environment and the file itself.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import sys
from typing import Any, Callable, Iterator, Sequence

import torch

from workloads import registry
from workloads.harness import cli, dist, energy, envinfo, metrics, precision, timing
from workloads.harness.device import Device, select
from workloads.harness.errors import Refused, refuse_and_exit


class Session:
    def __init__(self, workload: str, argv: Sequence[str] | None = None, *, training: bool = False) -> None:
        self.workload = registry.get(workload)
        self.args: argparse.Namespace = cli.parse_args(self.workload, argv)
        self.started_at = metrics.utc_now()
        self.dist_env = dist.detect()
        self.device: Device = select(self.args.device, self.dist_env.local_rank)
        self.precision = precision.resolve(self.args.precision, self.device, training=training)
        self.backend = dist.init(self.dist_env, self.device.type, self.device.torch_device)
        seed = int(getattr(self.args, "seed", 0) or 0)
        # Same seed everywhere: DDP ranks must start from identical weights; data differs by rank.
        torch.manual_seed(seed)
        random.seed(seed)
        self.device.reset_peak_memory()
        # Energy of the timed steps, from the device's own counter where it has one (energy.py).
        self.energy = energy.for_device(self.device.type, self.device.torch_device.index or 0,
                                        self.dist_env.local_rank, rocm=self.device.is_rocm)

    # --- who am I -------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.dist_env.rank

    @property
    def world_size(self) -> int:
        return self.dist_env.world_size

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def log(self, message: str) -> None:
        if self.is_main:
            print(f"[{self.workload.name}] {message}", file=sys.stderr, flush=True)

    # --- timing and reductions ------------------------------------------------------------
    def time_steps(self, step: Callable[[], Any], warmup: int | None = None, iters: int | None = None) -> list[float]:
        """``warmup`` untimed steps, then ``iters`` timed ones, then more while the timed steps
        add up to less than ``--min-time`` seconds (workloads that take it, e.g. gemm).

        Why: a short timed region (a 256^3 product is 0.2 ms on a CPU core, 100 steps 20 ms)
        lets one interrupt or page fault move the figure by tens of percent. The extra steps
        are decided from the slowest rank's total (re-estimated until reached), so every rank runs the same count (a
        step may be collective); at most ``timing.MAX_TIMED_STEPS`` steps in all.
        """
        warmup = self.args.warmup if warmup is None else warmup
        iters = self.args.iters if iters is None else iters
        times = timing.time_steps(self.device, step, warmup, iters, self.energy)
        min_time = float(getattr(self.args, "min_time", 0.0) or 0.0)
        # Re-estimated each round (at most 10): the first steps' rate can be off (one slow step).
        for _ in range(10 if min_time > 0 and times else 0):
            extra = timing.extra_steps(len(times), self.max_all(sum(times)), min_time)
            if not extra:
                break
            times += timing.time_steps(self.device, step, 0, extra, self.energy)
        return times

    @contextlib.contextmanager
    def metering(self) -> Iterator[None]:
        """The energy meter over a timed region a workload times by itself (``IntervalClock``);
        ``time_steps`` and ``clock()`` run it already. Starts and ends on an idle device."""
        self.device.synchronize()
        self.energy.resume()
        try:
            yield
        finally:
            self.device.synchronize()
            self.energy.pause()

    def clock(self) -> timing.StepClock:
        return timing.StepClock(self.device, self.energy)

    def ensure_process_group(self) -> str:
        """The process group, made for this rank alone when the run is not distributed."""
        if not dist.is_active():
            self.backend = dist.init_local(self.device.type, self.device.torch_device)
        return str(self.backend)

    def barrier(self) -> None:
        dist.barrier()

    def gather(self, value: Any) -> list[Any]:
        """``value`` from every rank, in rank order (a list of one when not distributed)."""
        return dist.all_gather_object(value)

    def sum_all(self, value: float) -> float:
        return float(sum(self.gather(float(value))))

    def max_all(self, value: float) -> float:
        return float(max(self.gather(float(value))))

    def slowest_steps(self, step_times: list[float]) -> list[float]:
        """Per step, the slowest rank's time: a synchronous step ends when its last rank does."""
        per_rank = self.gather([float(t) for t in step_times])
        return [max(times) for times in zip(*per_rank)]

    def mfu(self, model_flops_per_s_total: float) -> float | None:
        """Model FLOP/s over (devices x peak) at this precision; None without --peak-tflops."""
        peak = self.args.peak_tflops
        if not peak:
            return None
        return model_flops_per_s_total / (self.world_size * peak * 1e12)

    def params(self) -> dict[str, Any]:
        return dict(vars(self.args))

    # --- results --------------------------------------------------------------------------
    def finish(
        self,
        results: dict[str, Any],
        step_times: list[float],
        *,
        warmup_steps: int | None = None,
        timing_extra: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        already_gathered: bool = False,
    ) -> dict[str, Any] | None:
        """Collective: every rank calls it. Rank 0 writes ``--output``; returns the document there.

        ``results`` override the standard figures of the same name (e.g. a GEMM's
        ``tflops`` is the sum of every rank's own rate, not derived from step times).
        """
        steps = step_times if already_gathered else self.slowest_steps(step_times)
        peak_gb = self.max_all(self.device.peak_memory_bytes()) / 1e9
        hostnames = self.gather(socket.gethostname())
        cores = self.gather(_usable_cores())
        figures: dict[str, Any] = timing.summarize(steps) if steps else {}
        figures["peak_mem_gb"] = peak_gb
        reserved = self.device.peak_reserved_bytes()
        if reserved is not None:  # the same device type on every rank: all take this branch
            figures["peak_reserved_gb"] = self.max_all(reserved) / 1e9
        # The cores the run's processes had on rank 0's node, and each process's threads.
        figures["cores"] = len(set().union(*(c for c, h in zip(cores, hostnames) if h == hostnames[0])))
        figures["threads"] = torch.get_num_threads()
        figures.update(results)
        readings = self.gather(self.energy.reading())
        tokens = figures.get("tokens_per_s")
        energy_figures, energy_block = energy.figures(readings, len(steps), figures.get("timed_time_s"),
                                                      tokens if isinstance(tokens, (int, float)) else None)
        figures.update(energy_figures)
        if not self.is_main:
            return None
        env = envinfo.capture(self.device, self.backend)
        env["hostnames"] = sorted(set(hostnames))
        env["hostnames_by_rank"] = hostnames
        env["launcher"] = self.dist_env.launcher
        doc = metrics.document(
            workload=self.workload.name,
            params=self.params(),
            precision=self.precision.name,
            world_size=self.world_size,
            device={"type": self.device.type, "model": self.device.model, "count": self.world_size,
                    "per_node": self.device.local_count, "rocm": self.device.is_rocm},
            metrics=figures,
            warmup_steps=self.args.warmup if warmup_steps is None else warmup_steps,
            step_times_s=steps,
            env=env,
            started_at=self.started_at,
            finished_at=metrics.utc_now(),
            timing_extra=timing_extra,
            extra={"energy": energy_block, **(extra or {})},
        )
        if self.args.output:
            metrics.write_atomic(self.args.output, doc)
        self._print_summary(doc["metrics"])
        return doc

    def _print_summary(self, figures: dict[str, float | None]) -> None:
        shown = [f"{name}={value:.6g}" for name, value in figures.items() if value is not None]
        where = f"{self.world_size} x {self.device.type} ({self.device.model}), {self.precision.name}"
        print(f"{self.workload.name} on {where}: " + " ".join(shown), flush=True)
        if self.args.output:
            print(f"metrics written to {os.fspath(self.args.output)}", flush=True)

    def close(self, together: bool = True) -> None:
        """Leave the process group; ``together=False`` on a refusal (other ranks may not wait)."""
        dist.shutdown(together)


def _usable_cores() -> list[int]:
    """The cores this process may use: the ones orch's local site granted (``ORCH_CORES``),
    else the process's affinity mask (every core where the OS has no such mask)."""
    granted = os.environ.get("ORCH_CORES", "").strip()
    if granted:
        try:
            return sorted({int(core) for core in granted.split(",") if core.strip()})
        except ValueError:
            pass
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def run_workload(
    name: str,
    body: Callable[[Session], Any],
    argv: Sequence[str] | None = None,
    *,
    training: bool = False,
) -> int:
    """Entry point of every workload: a refusal is one line on stderr and exit code 2."""
    try:
        session = Session(name, argv, training=training)
    except Refused as exc:
        refuse_and_exit(name, exc)
    try:
        body(session)
    except Refused as exc:
        session.close(together=False)
        refuse_and_exit(name, exc)
    had_group = dist.is_active()
    session.close()
    if had_group or "deepspeed" in sys.modules:
        # Native communication threads (gloo's under torch DDP/FSDP, DeepSpeed's) can abort the
        # interpreter's teardown after the group is destroyed ("terminate called without an
        # active exception": about 1 DeepSpeed run in 10 on CPU, and 3 two-rank DDP runs in one
        # full test run), which turns a finished run into a failed one although its metrics are
        # written. Nothing is left to do: end the process here instead.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
