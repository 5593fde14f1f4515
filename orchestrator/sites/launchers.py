"""Launchers: how a site starts N processes of a workload. Add one by adding a class
registered with ``@LAUNCHERS.register("<name>")`` (its options model goes in
:mod:`orchestrator.sites.launcher_options`, registered under the same name).

Each returns an argv list; the renderer quotes every element, so nothing from a
sweep or a profile reaches the shell unquoted. What needs the shell at run time
(the first host of the allocation, per-rank device numbers) is done by the
templates, never by a launcher: a launcher that needs a rendezvous address sets
``rendezvous`` and reads it from the environment the template exports
(``MASTER_ADDR``; ``PET_RDZV_ENDPOINT`` for torchrun, which reads ``PET_*``
variables for its options); a rank wrapper (``rank_wrapper``) is written by the
template when the profile asks for GPU affinity.

Registered launchers (``launcher.name`` in a profile):

========== ==============================================================================
python     one process, no launcher
single     one process that drives every device of the run (Graphcore PopTorch replicas,
           GroqFlow); ``options.via: srun`` starts it as a one-task Slurm step
torchrun   ``torch.distributed.run``: standalone on one node; on several nodes one
           torchrun per node started by ``srun`` (Slurm) or ``mpiexec --ppn 1`` (PBS),
           c10d rendezvous at the first host
srun       Slurm ``srun``, one task per device (``--mpi=pmi2`` etc. through ``args``)
mpiexec    MPICH/Cray PALS ``mpiexec -n N --ppn K`` (Polaris), one rank per device
mpirun     Intel MPI / Open MPI ``mpirun -n N -ppn K`` (Dawn)
deepspeed  the ``deepspeed`` launcher (``--module``; hostfile written by the template
           on several nodes, ``--launcher slurm|mpich`` by scheduler)
gaudi_spawn Habana's ``gaudi_spawn.py --world_size N --use_mpi|--use_deepspeed``
========== ==============================================================================

Vendor runners (``cerebras``, ``sambaflow``, ``poptorch``, ``groqflow``) are launchers too, in
``orchestrator/sites/vendors/``: they run the vendor's own application, then an adapter that writes
the metrics file. :data:`LAUNCHERS` imports their modules (named in :data:`VENDOR_MODULES`, by
name: this module never imports them, they import it) before its first lookup or listing.

Standard library only: the vendor adapters import this module on compute nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from orchestrator.registry import Registry

# The vendor runners' modules, imported (hence registered) by LAUNCHERS before its first lookup.
VENDOR_MODULES = tuple(f"orchestrator.sites.vendors.{vendor}" for vendor in ("cerebras", "sambanova", "graphcore",
                                                                             "groq"))


@dataclass(frozen=True)
class LaunchRequest:
    python: str
    module: str
    args: list[str]
    nodes: int
    tasks_per_node: int
    extra_args: list[str]  # the profile's launcher.args
    scheduler: str = "local"
    devices_per_node: int | None = None  # devices on each node (default: tasks_per_node)
    # Words put before the program on every rank (e.g. the GPU affinity wrapper).
    rank_wrapper: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # the profile's launcher.options
    script: str | None = None  # the workload as a file (for runners that take a script path)
    workload: str = ""  # the workload's registry name

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def devices(self) -> int:
        return self.nodes * (self.devices_per_node or self.tasks_per_node)


# Every launcher by ``launcher.name``; the vendor runners' modules are imported before a lookup.
LAUNCHERS: Registry[type["Launcher"]] = Registry("launcher", modules=VENDOR_MODULES, name_attr="name")


class Launcher:
    name: ClassVar[str] = ""  # set by LAUNCHERS.register
    max_nodes: ClassVar[int | None] = None  # None: no limit of its own
    # True: one process drives all the devices of a node (tasks_per_node is 1).
    single_process: ClassVar[bool] = False

    def program(self, req: LaunchRequest) -> list[str]:
        return [*req.rank_wrapper, req.python, "-m", req.module, *req.args]

    def argv(self, req: LaunchRequest) -> list[str]:
        raise NotImplementedError

    def pre_steps(self, req: LaunchRequest) -> list[list[str]]:
        """Commands run before ``argv`` in the same script (e.g. a compile step)."""
        return []

    def rendezvous(self, req: LaunchRequest) -> bool:
        """True when the script must export MASTER_ADDR (and PET_RDZV_*) before launching."""
        return False

    def hostfile(self, req: LaunchRequest) -> bool:
        """True when the script must write ``orch-hostfile`` (one ``host slots=K`` line per node)."""
        return False

    def check(self, req: LaunchRequest) -> str | None:
        """Why this launcher cannot start ``req`` (None when it can)."""
        if self.max_nodes is not None and req.nodes > self.max_nodes:
            return f"launcher {self.name} runs on at most {self.max_nodes} node(s), run needs {req.nodes}"
        return None


@LAUNCHERS.register("python")
class PythonLauncher(Launcher):
    """One process, no launcher: ``python -m workloads.X``."""

    max_nodes = 1

    def check(self, req: LaunchRequest) -> str | None:
        if req.tasks > 1:
            return f"launcher python starts one process, run needs {req.tasks}"
        return super().check(req)

    def argv(self, req: LaunchRequest) -> list[str]:
        return self.program(req)


@LAUNCHERS.register("single")
class SingleProcessLauncher(Launcher):
    """One process for all the run's devices (PopTorch replicas on IPUs, GroqFlow on GroqCards)."""

    max_nodes = 1
    single_process = True

    def argv(self, req: LaunchRequest) -> list[str]:
        if req.options.get("via") == "srun":
            return ["srun", "--nodes=1", "--ntasks=1", *req.extra_args, *self.program(req)]
        return [*req.extra_args, *self.program(req)] if req.extra_args else self.program(req)


@LAUNCHERS.register("torchrun")
class TorchrunLauncher(Launcher):
    """``torch.distributed.run``: standalone on one node; one per node through srun/mpiexec on several."""

    RDZV_PORT: ClassVar[int] = 29400

    def _via(self, req: LaunchRequest) -> str | None:
        via = req.options.get("via")
        if via:
            return str(via)
        return {"slurm": "srun", "pbs": "mpiexec"}.get(req.scheduler)

    def check(self, req: LaunchRequest) -> str | None:
        if req.nodes > 1 and self._via(req) not in ("srun", "mpiexec"):
            return (f"launcher torchrun needs srun or mpiexec to start one torchrun per node on "
                    f"{req.nodes} nodes (scheduler {req.scheduler}; set launcher.options.via)")
        return super().check(req)

    def rendezvous(self, req: LaunchRequest) -> bool:
        return req.nodes > 1

    def argv(self, req: LaunchRequest) -> list[str]:
        if req.tasks == 1:
            return self.program(req)
        # No rank wrapper here: torchrun starts the ranks itself (they read LOCAL_RANK).
        inner = [req.python, "-m", "torch.distributed.run"]
        tail = [*req.extra_args, "-m", req.module, *req.args]
        if req.nodes == 1:
            return [*inner, "--standalone", "--nnodes=1", f"--nproc-per-node={req.tasks_per_node}", *tail]
        # Several nodes: the template exports PET_RDZV_ENDPOINT=<first host>:<port> and PET_RDZV_ID.
        inner = [req.python, "-m", "torch.distributed.run", f"--nnodes={req.nodes}",
                 f"--nproc-per-node={req.tasks_per_node}", "--rdzv-backend=c10d", *tail]
        if self._via(req) == "srun":
            return ["srun", f"--nodes={req.nodes}", "--ntasks-per-node=1", f"--ntasks={req.nodes}", *inner]
        return ["mpiexec", "-n", str(req.nodes), "--ppn", "1", *inner]


@LAUNCHERS.register("srun")
class SrunLauncher(Launcher):
    """Slurm's ``srun``: one task per device; the workload reads SLURM_* to initialise."""

    def argv(self, req: LaunchRequest) -> list[str]:
        return [
            "srun", f"--nodes={req.nodes}", f"--ntasks-per-node={req.tasks_per_node}",
            f"--ntasks={req.tasks}", *req.extra_args, *self.program(req),
        ]


@LAUNCHERS.register("mpiexec")
class MpiexecLauncher(Launcher):
    """MPICH / Cray PALS ``mpiexec -n N --ppn K`` (Polaris); the workload reads PMI_*/PALS_*."""

    def argv(self, req: LaunchRequest) -> list[str]:
        return ["mpiexec", "-n", str(req.tasks), "--ppn", str(req.tasks_per_node), *req.extra_args,
                *self.program(req)]


@LAUNCHERS.register("mpirun")
class MpirunLauncher(Launcher):
    """Intel MPI / Open MPI ``mpirun -n N -ppn K`` (Dawn: ``mpirun -n 8 -ppn 8``)."""

    def argv(self, req: LaunchRequest) -> list[str]:
        return ["mpirun", "-n", str(req.tasks), "-ppn", str(req.tasks_per_node), *req.extra_args,
                *self.program(req)]


@LAUNCHERS.register("deepspeed")
class DeepSpeedLauncher(Launcher):
    """The ``deepspeed`` launcher; on several nodes it reads the hostfile the template writes."""

    def hostfile(self, req: LaunchRequest) -> bool:
        return req.nodes > 1

    def rendezvous(self, req: LaunchRequest) -> bool:
        return req.nodes > 1

    def check(self, req: LaunchRequest) -> str | None:
        if req.nodes > 1 and req.scheduler not in ("slurm", "pbs"):
            return f"launcher deepspeed needs a scheduler's node list for {req.nodes} nodes"
        return super().check(req)

    def argv(self, req: LaunchRequest) -> list[str]:
        argv = ["deepspeed", f"--num_nodes={req.nodes}", f"--num_gpus={req.tasks_per_node}"]
        if req.nodes > 1:
            backend = req.options.get("multinode_launcher") or ("slurm" if req.scheduler == "slurm" else "mpich")
            argv += ["--hostfile=orch-hostfile", f"--launcher={backend}", "--master_port=29500"]
        # --no_local_rank: the workloads read LOCAL_RANK from the environment, not --local_rank.
        return [*argv, "--no_local_rank", *req.extra_args, "--module", req.module, *req.args]


@LAUNCHERS.register("gaudi_spawn")
class GaudiSpawnLauncher(Launcher):
    """Habana's ``gaudi_spawn.py --world_size N --use_mpi`` (or ``--use_deepspeed``) on one node."""

    max_nodes = 1
    MODES: ClassVar[tuple[str, ...]] = ("mpi", "deepspeed")  # --use_mpi, --use_deepspeed

    def check(self, req: LaunchRequest) -> str | None:
        # A profile's mode is checked when it loads (launcher_options.GaudiSpawnOptions); this
        # catches a request built some other way, instead of running it under another mode.
        mode = str(req.options.get("mode", "mpi"))
        if mode not in self.MODES:
            return f"launcher gaudi_spawn: unknown mode {mode!r} (valid: {', '.join(self.MODES)})"
        return super().check(req)

    def argv(self, req: LaunchRequest) -> list[str]:
        program = str(req.options.get("program", "gaudi_spawn.py"))
        mode = str(req.options.get("mode", "mpi"))
        if req.tasks == 1:
            return self.program(req)
        script = req.script or req.module
        return [req.python, program, "--world_size", str(req.tasks), f"--use_{mode}", *req.extra_args,
                script, *req.args]


def get_launcher(name: str) -> Launcher:
    """An instance of the launcher registered as ``name``; UnknownName (a KeyError) lists the known ones."""
    return LAUNCHERS.get(name)()
