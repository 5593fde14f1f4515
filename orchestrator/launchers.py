"""Launchers: how a site starts N processes of a workload. Add one by adding a class.

Each returns an argv list; the renderer quotes every element, so nothing from a
sweep or a profile reaches the shell unquoted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class LaunchRequest:
    python: str
    module: str
    args: list[str]
    nodes: int
    tasks_per_node: int
    extra_args: list[str]  # the profile's launcher.args

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node


class Launcher:
    name: ClassVar[str]
    max_nodes: ClassVar[int | None] = None  # None: no limit of its own
    registry: ClassVar[dict[str, type["Launcher"]]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        Launcher.registry[cls.name] = cls

    def program(self, req: LaunchRequest) -> list[str]:
        return [req.python, "-m", req.module, *req.args]

    def argv(self, req: LaunchRequest) -> list[str]:
        raise NotImplementedError

    def check(self, req: LaunchRequest) -> str | None:
        """Why this launcher cannot start ``req`` (None when it can)."""
        if self.max_nodes is not None and req.nodes > self.max_nodes:
            return f"launcher {self.name} runs on at most {self.max_nodes} node(s), run needs {req.nodes}"
        return None


class PythonLauncher(Launcher):
    """One process, no launcher: ``python -m workloads.X``."""

    name = "python"
    max_nodes = 1

    def check(self, req: LaunchRequest) -> str | None:
        if req.tasks > 1:
            return f"launcher python starts one process, run needs {req.tasks}"
        return super().check(req)

    def argv(self, req: LaunchRequest) -> list[str]:
        return self.program(req)


class TorchrunLauncher(Launcher):
    """``torch.distributed.run`` on one node (standalone rendezvous); plain python for one task."""

    name = "torchrun"
    max_nodes = 1

    def argv(self, req: LaunchRequest) -> list[str]:
        if req.tasks == 1:
            return self.program(req)
        return [
            req.python, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={req.tasks_per_node}", *req.extra_args, "-m", req.module, *req.args,
        ]


class SrunLauncher(Launcher):
    """Slurm's ``srun``: one task per device; the workload reads SLURM_* to initialise."""

    name = "srun"

    def argv(self, req: LaunchRequest) -> list[str]:
        return [
            "srun", f"--nodes={req.nodes}", f"--ntasks-per-node={req.tasks_per_node}",
            f"--ntasks={req.tasks}", *req.extra_args, *self.program(req),
        ]


def get_launcher(name: str) -> Launcher:
    try:
        return Launcher.registry[name]()
    except KeyError:
        raise KeyError(f"unknown launcher {name!r} (known: {', '.join(sorted(Launcher.registry))})") from None
