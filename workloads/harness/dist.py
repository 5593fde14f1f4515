"""Process-group set-up from whichever launcher started us.

Launchers and the variables read, in this order of precedence:

- torchrun / torch.distributed.run / deepspeed: RANK, WORLD_SIZE, LOCAL_RANK,
  MASTER_ADDR, MASTER_PORT (they win, also when torchrun runs inside srun);
- Slurm ``srun``: SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS),
  SLURM_LOCALID; master = first host of SLURM_STEP_NODELIST/SLURM_JOB_NODELIST
  (``scontrol show hostnames`` when present, else the simple bracket forms are
  parsed); port = 20000 + job id mod 20000. Only inside a job *step*
  (SLURM_STEP_ID set): the batch script itself also has SLURM_PROCID=0, and a
  lone ``python`` there must not wait for tasks that were never started;
- PBS with Cray PALS / MPICH / Intel MPI ``mpiexec``: PALS_RANKID or PMI_RANK,
  PMI_SIZE, PALS_LOCAL_RANKID or PMI_LOCAL_RANK or MPI_LOCALRANKID; master =
  first line of PBS_NODEFILE; port from the PBS job id;
- Open MPI ``mpirun``: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK.

MASTER_ADDR and MASTER_PORT, when set, always win over derived values.
Backends: gloo on cpu, nccl on cuda (RCCL on ROCm), xccl (or oneCCL's ccl) on
xpu, hccl on hpu.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping

import torch
import torch.distributed as dist

from workloads.harness.errors import Refused

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # single | torchrun | slurm | pmi | ompi
    master_addr: str | None = None
    master_port: int | None = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def first_host(nodelist: str) -> str:
    """First host of a Slurm hostlist: ``nid[001-004,010],gpu7`` -> ``nid001``.

    Handles the forms Slurm prints: comma lists, one or several bracket groups
    per name (``r[1-2]n[3-4]`` -> ``r1n3``), zero padding kept.
    """
    text = nodelist.strip()
    depth = 0
    end = len(text)
    for i, char in enumerate(text):  # the first top-level comma ends the first name
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            end = i
            break
    name = text[:end]
    # Each [a-b,c] group contributes the start of its first range.
    return re.sub(r"\[([^\]]*)\]", lambda m: re.split(r"[-,]", m.group(1))[0], name)


def _scontrol_first_host(nodelist: str) -> str | None:
    if shutil.which("scontrol") is None:
        return None
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=20, check=True
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


def _port_from_job_id(job_id: str | None) -> int:
    match = re.match(r"\d+", (job_id or "").strip())  # "98765.polaris-pbs-01" -> 98765
    digits = match.group(0) if match else ""
    # A port per job, so two jobs sharing a node do not collide, kept in the unprivileged range.
    return 20000 + int(digits) % 20000 if digits else DEFAULT_PORT


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return int(str(value))
    return None


def detect(env: Mapping[str, str] | None = None, *, use_scontrol: bool = True) -> DistEnv:
    """Rank, size and rendezvous from the launcher's variables (pure apart from scontrol)."""
    env = os.environ if env is None else env
    addr = env.get("MASTER_ADDR") or None
    port = _int(env, "MASTER_PORT")

    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        return DistEnv(int(env["RANK"]), int(env["WORLD_SIZE"]), _int(env, "LOCAL_RANK") or 0, "torchrun",
                       addr or "127.0.0.1", port or DEFAULT_PORT)

    if env.get("SLURM_PROCID") is not None and (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        world = _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS") or 1
        if addr is None:
            nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
            if nodelist:
                addr = (_scontrol_first_host(nodelist) if use_scontrol else None) or first_host(nodelist)
        return DistEnv(int(env["SLURM_PROCID"]), world, _int(env, "SLURM_LOCALID") or 0, "slurm",
                       addr or "127.0.0.1", port or _port_from_job_id(env.get("SLURM_JOB_ID")))

    pmi_rank = _int(env, "PALS_RANKID", "PMI_RANK")
    pmi_size = _int(env, "PMI_SIZE", "PALS_SIZE")
    if pmi_rank is not None and pmi_size is not None:
        if addr is None and env.get("PBS_NODEFILE"):
            addr = _first_line(env["PBS_NODEFILE"])
        local = _int(env, "PALS_LOCAL_RANKID", "PMI_LOCAL_RANK", "MPI_LOCALRANKID") or 0
        return DistEnv(pmi_rank, pmi_size, local, "pmi", addr, port or _port_from_job_id(env.get("PBS_JOBID")))

    if env.get("OMPI_COMM_WORLD_RANK") is not None:
        return DistEnv(int(env["OMPI_COMM_WORLD_RANK"]), _int(env, "OMPI_COMM_WORLD_SIZE") or 1,
                       _int(env, "OMPI_COMM_WORLD_LOCAL_RANK") or 0, "ompi", addr,
                       port or _port_from_job_id(env.get("PBS_JOBID") or env.get("SLURM_JOB_ID")))

    return DistEnv(0, 1, 0, "single", addr, port)


def _first_line(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    return line.strip()
    except OSError:
        return None
    return None


def backend_for(device_type: str) -> str:
    if device_type == "cuda":
        return "nccl"
    if device_type == "xpu":
        # PyTorch >= 2.8 ships the xccl backend; older stacks need Intel's oneCCL bindings.
        if dist.is_backend_available("xccl"):
            return "xccl"
        try:
            import oneccl_bindings_for_pytorch  # noqa: F401
        except ImportError as exc:
            raise Refused("xpu needs the xccl backend (PyTorch >= 2.8) or oneccl_bindings_for_pytorch") from exc
        return "ccl"
    if device_type == "hpu":
        import habana_frameworks.torch.distributed.hccl  # noqa: F401  (registers hccl)

        return "hccl"
    return "gloo"


def init(denv: DistEnv, device_type: str, torch_device: torch.device | None = None,
         *, force: bool = False, timeout: timedelta | None = None) -> str | None:
    """Join the process group when there is more than one rank (or ``force``); returns the backend.
    ``timeout`` (default 10 minutes) bounds the wait for the other ranks and each collective."""
    if not denv.distributed and not force:
        return None
    if dist.is_initialized():
        return str(dist.get_backend())
    if not denv.master_addr:
        raise Refused(f"{denv.launcher} launch of {denv.world_size} ranks but no master address: "
                      "set MASTER_ADDR (and MASTER_PORT)")
    # init_method env:// reads these; torchrun set them already, the others need them set.
    os.environ["MASTER_ADDR"] = denv.master_addr
    os.environ["MASTER_PORT"] = str(denv.master_port or DEFAULT_PORT)
    # Libraries that read these (DeepSpeed) must see the launcher's values.
    os.environ.setdefault("RANK", str(denv.rank))
    os.environ.setdefault("WORLD_SIZE", str(denv.world_size))
    os.environ.setdefault("LOCAL_RANK", str(denv.local_rank))
    backend = backend_for(device_type)
    kwargs: dict[str, Any] = {}
    if device_type == "cuda" and torch_device is not None and _takes_device_id():
        kwargs["device_id"] = torch_device  # binds NCCL to the device, avoids a guess in barrier()
    dist.init_process_group(backend=backend, rank=denv.rank, world_size=denv.world_size,
                            timeout=timeout or timedelta(minutes=10), **kwargs)
    return backend


def _takes_device_id() -> bool:
    """Whether this torch's init_process_group has ``device_id`` (PyTorch 2.2, pytorch#114916):
    2.1 (Baskerville's PyTorch/2.1.2 module) raised TypeError on it, failing every multi-GPU run
    (issue 53); there the device set for the rank (torch.cuda.set_device) is NCCL's."""
    import inspect

    return "device_id" in inspect.signature(dist.init_process_group).parameters


def init_local(device_type: str, torch_device: torch.device | None = None,
               timeout: timedelta | None = None) -> str:
    """A one-rank group on this host, for code that needs a group even alone (FSDP, DeepSpeed)."""
    import socket

    with socket.socket() as sock:  # a free port for the one-rank rendezvous
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    return str(init(DistEnv(0, 1, 0, "single", "127.0.0.1", port), device_type, torch_device, force=True,
                    timeout=timeout))


def is_active() -> bool:
    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    if is_active():
        dist.barrier()


def all_gather_object(obj: Any) -> list[Any]:
    if not is_active():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def shutdown(together: bool = True) -> None:
    if is_active():
        if together:
            # Leave together: a rank tearing down its group while another still writes the
            # metrics file has been seen to abort at exit (DeepSpeed on gloo).
            dist.barrier()
        dist.destroy_process_group()
