"""The site probe: what a campaign depends on, as a compute node sees it.

``orch sites probe SITE`` renders this program into a batch script from the site's own profile
(its setup lines, environment, launcher, Python) and submits it like any run; by hand it is
``torchrun --nproc-per-node 2 -m workloads.probe --device cpu --output probe.json``.

Every rank finds out, and rank 0 reports in the metrics file's ``probe`` section
(schema :data:`SCHEMA`):

- ``python``: the interpreter the launcher started (executable, version);
- ``torch``, ``deepspeed``: their versions, or null with the import's error;
- ``devices``: the device type asked for (``--device``), how many this rank sees and their names;
- ``allreduce``: one all-reduce of ``--elements`` float32 values over every rank, on the device's
  backend (gloo on cpu, nccl on cuda, xccl/ccl on xpu, hccl on hpu), checked for the right sum,
  then timed (``--warmup`` + ``--iters``) with nccl-tests' figures (busbw = algbw x 2(n-1)/n);
- ``run_dir``: the text of ``--marker`` in the run directory, which orch wrote on the login node
  (a token the job cannot guess: it proves the node sees the directory orch writes into);
- ``modules``: ``$LOADEDMODULES``; ``ranks``: each rank's host, node and local rank.

Unlike the benchmarks it never refuses: what is missing is the finding, so it is written down.
Without torch nothing but the report can run; the program then imports nothing that needs torch
(``workloads.harness.cli`` and ``.metrics`` do not), rank 0 writes what it found and exits 1.
It exits 1 too when the device, the process group or the all-reduce failed, after writing.
"""

from __future__ import annotations

import importlib
import math
import os
import platform
import socket
import sys
import traceback
from argparse import Namespace
from datetime import timedelta
from typing import Any, Sequence

from workloads import flops
from workloads.harness import cli, metrics
from workloads.registry import get as get_workload

SCHEMA = "orch.probe/1"


def _error(exc: BaseException) -> str:
    """One line: the exception's type and message (an import error's says what is missing)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".rstrip(": ")


def _version_of(module: str) -> tuple[str | None, str | None]:
    """(version, None) when ``module`` imports, else (None, why): absent, or installed but broken."""
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # ImportError, or whatever a broken install raises while importing
        return None, _error(exc)
    return str(getattr(imported, "__version__", "unknown")), None


def _node_name() -> str:
    """The scheduler's name for this node (Slurm's virtual nodes share one host), else the host's."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def _rank_info(local_rank: int, rank: int) -> dict[str, Any]:
    return {"rank": rank, "local_rank": local_rank, "hostname": socket.gethostname(), "node": _node_name()}


def _marker(name: str) -> dict[str, Any]:
    """What the marker file orch wrote says, read from the run directory the script runs in."""
    path = os.path.join(os.environ.get("ORCH_RUN_DIR") or os.getcwd(), name)
    try:
        with open(path, encoding="utf-8") as handle:
            return {"path": path, "token": handle.read().strip(), "error": None}
    except OSError as exc:
        return {"path": path, "token": None, "error": f"{type(exc).__name__}: {exc.strerror or exc}"}


def _rank_without_torch(env: dict[str, str] | os._Environ[str] = os.environ) -> int:
    """This process's rank from the launcher's variables, where torch (and so the harness's
    ``dist``, which imports it) is missing: only rank 0 writes the report."""
    slurm_step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    for name in ("RANK", "PALS_RANKID", "PMI_RANK", "OMPI_COMM_WORLD_RANK") + (("SLURM_PROCID",) if slurm_step else ()):
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def _base_report(args: Namespace) -> dict[str, Any]:
    modules = os.environ.get("LOADEDMODULES", "")
    return {
        "schema": SCHEMA,
        "python": {"executable": sys.executable, "version": platform.python_version(),
                   "implementation": platform.python_implementation()},
        "torch": None, "torch_error": None, "deepspeed": None, "deepspeed_error": None,
        "devices": {"type": args.device, "count": 0, "names": [], "error": None},
        "allreduce": {"ok": False, "backend": None, "ranks": None, "error": "not run"},
        "run_dir": _marker(args.marker),
        "modules": [m for m in modules.split(":") if m],
        "hostname": socket.gethostname(),
        "node": _node_name(),
        "launcher": None,
        "ranks": [],
        "nodes": [],
    }


def _write(args: Namespace, report: dict[str, Any], device_model: str, world: int, per_node: int,
           figures: dict[str, Any], step_times: list[float], started: str) -> None:
    """The metrics file (orch.metrics/1) with the report as its ``probe`` section."""
    if not args.output:
        return
    doc = metrics.document(
        workload="probe", params=dict(vars(args)), precision=args.precision, world_size=max(1, world),
        device={"type": report["devices"]["type"], "model": device_model, "count": max(1, world),
                "per_node": per_node},
        metrics=figures, warmup_steps=args.warmup if step_times else 0, step_times_s=step_times,
        env={"python": report["python"]["version"], "torch": report["torch"], "hostname": report["hostname"],
             "hostnames": sorted({r["hostname"] for r in report["ranks"]}) or [report["hostname"]],
             "launcher": report["launcher"]},
        started_at=started, finished_at=metrics.utc_now(), extra={"probe": report})
    metrics.write_atomic(args.output, doc)


def _failed(report: dict[str, Any]) -> list[str]:
    """What the program itself can tell went wrong (orch judges the rest: nodes, token, modules)."""
    failed = ["torch"] if report["torch"] is None else []
    if report["devices"]["error"]:
        failed.append("devices")
    if not report["allreduce"]["ok"]:
        failed.append("allreduce")
    return failed


def _print(report: dict[str, Any]) -> None:
    """A few lines for the job's log: what a person reading stdout.log wants first."""
    ar = report["allreduce"]
    print(f"probe: python {report['python']['version']} ({report['python']['executable']}), "
          f"torch {report['torch'] or 'absent'}, deepspeed {report['deepspeed'] or 'absent'}", flush=True)
    devices = report["devices"]
    print(f"probe: {devices['count']} x {devices['type']} {', '.join(dict.fromkeys(devices['names']))}"
          + (f" ({devices['error']})" if devices["error"] else ""), flush=True)
    print(f"probe: all-reduce over {ar.get('ranks')} rank(s) on {len(report['nodes'])} node(s), "
          f"{ar.get('backend')}: " + (f"busbw {ar['busbw_gbs']:.3f} GB/s" if ar["ok"] else f"failed ({ar['error']})"),
          flush=True)
    print(f"probe: run dir marker {'read' if report['run_dir']['token'] else 'missing'}; "
          f"modules: {' '.join(report['modules']) or '(none)'}", flush=True)


def _devices_seen(torch: Any, device_type: str) -> tuple[int, list[str]]:
    """How many devices of the type this process sees, and their names."""
    from workloads.harness.device import available, cpu_model

    if device_type == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return cores, [cpu_model()]
    if not available(device_type):
        return 0, []
    if device_type == "hpu":
        return int(torch.hpu.device_count()), [str(torch.hpu.get_device_name())]
    module = getattr(torch, device_type)
    count = int(module.device_count())
    return count, [str(module.get_device_name(i)) for i in range(count)]


def _allreduce(args: Namespace, torch: Any, device: Any, world: int, rank: int) -> tuple[dict[str, Any], list[float]]:
    """One all-reduce checked for the right sum, then timed; (figures, slowest rank's step times)."""
    import torch.distributed as torch_dist

    from workloads.harness import dist, timing

    buf = torch.full((max(1, args.elements),), float(rank + 1), device=device.torch_device, dtype=torch.float32)
    torch_dist.all_reduce(buf)
    expected = world * (world + 1) / 2  # the sum of rank + 1 over the ranks
    got = float(buf[0].item()), float(buf[-1].item())
    if any(abs(v - expected) > 1e-3 * expected for v in got):
        raise RuntimeError(f"all-reduce gave {got}, expected {expected} on every element")
    own = timing.time_steps(device, lambda: torch_dist.all_reduce(buf), args.warmup, args.iters)
    per_rank = dist.all_gather_object(math.fsum(own) / len(own))  # nccl-tests: each rank's mean, averaged
    mean = sum(per_rank) / len(per_rank)
    nbytes = buf.numel() * buf.element_size()
    algbw, busbw = flops.allreduce_bandwidths(nbytes, mean, world)
    slowest = [max(times) for times in zip(*dist.all_gather_object(own))]
    return {"ok": True, "error": None, "correct": True, "bytes": nbytes, "time_s": mean,
            "algbw_gbs": algbw / 1e9, "busbw_gbs": busbw / 1e9}, slowest


def _with_torch(args: Namespace, report: dict[str, Any], started: str) -> int:
    import torch

    from workloads.harness import dist
    from workloads.harness.device import select

    denv = dist.detect()
    report["launcher"] = denv.launcher
    report["deepspeed"], report["deepspeed_error"] = _version_of("deepspeed")
    device_type = args.device
    device = None
    try:
        device = select(device_type, denv.local_rank)
        device_type = device.type
    except Exception as exc:  # the device the profile names is not there: the finding
        report["devices"]["error"] = _error(exc)
    report["devices"]["type"] = device_type
    try:
        report["devices"]["count"], report["devices"]["names"] = _devices_seen(torch, device_type)
    except Exception as exc:
        report["devices"]["error"] = report["devices"]["error"] or _error(exc)
    figures: dict[str, Any] = {}
    steps: list[float] = []
    ar = report["allreduce"]
    ar["ranks"] = denv.world_size
    if device is None:
        ar["error"] = f"no {device_type} device here"
    else:
        timeout = timedelta(seconds=max(1, args.comm_timeout))
        try:
            ar["backend"] = dist.backend_for(device.type)
            if denv.distributed:
                dist.init(denv, device.type, device.torch_device, timeout=timeout)
            else:
                dist.init_local(device.type, device.torch_device, timeout=timeout)
            result, steps = _allreduce(args, torch, device, denv.world_size, denv.rank)
            ar.update(result)
            figures = {"bandwidth_gbs": ar["busbw_gbs"], "busbw_gbs": ar["busbw_gbs"], "algbw_gbs": ar["algbw_gbs"],
                       "message_bytes": ar["bytes"], "bus_factor": flops.allreduce_bus_factor(denv.world_size)}
        except Exception as exc:  # no rendezvous, a backend missing, a wrong sum: the finding
            ar["ok"], ar["error"] = False, _error(exc)
            traceback.print_exc()
    mine = _rank_info(denv.local_rank, denv.rank)
    mine["devices"] = report["devices"]["names"][:1] if device_type == "cpu" else report["devices"]["names"]
    try:
        report["ranks"] = dist.all_gather_object(mine) if ar["ok"] else [mine]
    except Exception:  # the group broke after the all-reduce: this rank's own view
        report["ranks"] = [mine]
    report["nodes"] = sorted({r["node"] for r in report["ranks"]})
    if ar["ok"]:
        ar["nodes"] = len(report["nodes"])
        figures.update(_timing_figures(steps))
    if denv.rank == 0:
        per_node = sum(1 for r in report["ranks"] if r["node"] == report["node"]) or 1
        model = device.model if device is not None else device_type
        _write(args, report, model, denv.world_size, per_node, figures, steps, started)
        _print(report)
    code = 1 if denv.rank == 0 and _failed(report) else 0
    if dist.is_active():
        try:
            dist.shutdown(together=ar["ok"])
        except Exception:
            pass
        # As run_workload does: gloo's threads can abort the interpreter's teardown after the
        # group is gone, turning a written report into a failed job.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _timing_figures(steps: list[float]) -> dict[str, float]:
    from workloads.harness import timing

    return timing.summarize(steps) if steps else {}


def main(argv: Sequence[str] | None = None) -> int:
    args = cli.parse_args(get_workload("probe"), argv)
    started = metrics.utc_now()
    report = _base_report(args)
    report["torch"], report["torch_error"] = _version_of("torch")
    if report["torch"] is None:
        # Nothing else can run: no device, no process group. Rank 0 says what it found.
        report["deepspeed_error"] = "not tried: DeepSpeed needs torch"
        report["allreduce"]["error"] = "not run: torch cannot be imported"
        report["devices"]["error"] = "not looked for: torch cannot be imported"
        rank = _rank_without_torch()
        report["ranks"] = [_rank_info(0, rank)]
        report["nodes"] = [report["node"]]
        if rank != 0:
            return 0
        _write(args, report, args.device, 1, 1, {}, [], started)
        _print(report)
        return 1
    return _with_torch(args, report, started)


if __name__ == "__main__":
    raise SystemExit(main())
