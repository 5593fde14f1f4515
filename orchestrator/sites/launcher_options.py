"""Each launcher's options (a profile's ``launcher.options``), typed: one model per launcher name.

A profile's ``launcher.name`` must be one of :data:`LAUNCHER_OPTIONS`' names and its
``launcher.options`` must validate against that launcher's model when the profile loads: a
misspelt key or a value outside a launcher's choices (gaudi_spawn's ``mode``) is an error that
names the file, the line and the valid keys or values, never a silent default.

The launchers themselves (:mod:`orchestrator.sites.launchers`, the vendor runners in
:mod:`orchestrator.sites.vendors`) are standard-library Python, because the vendor adapters
import them on compute nodes that have no pydantic: their option models are here, registered
under the same names (a test asserts the two sets of names are equal). The launchers read the
profile's options as given; the defaults below are theirs, written down.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from orchestrator.registry import Registry
from orchestrator.sites.options import Options


class LauncherOptions(Options):
    """Base of the launcher option models: no key it does not declare (a launcher with no options
    takes none)."""

    # Options that name files or directories the job reads (a text, a list of them, or a mapping to
    # them). The batch script changes to the run directory before the launcher starts, so a relative
    # one resolves there, not where the user's clone or data is: the plan warns (lint relative-path,
    # orchestrator/plan/lints.py). Outputs a run may keep in its own directory (Cerebras model_dir),
    # and paths the vendor's tool resolves against a root of its own (Cerebras compile_dir: "appended
    # to a base root directory common for all compiles on the Wafer-Scale Cluster", the model zoo's
    # run argument parser), are not listed.
    input_paths: ClassVar[tuple[str, ...]] = ()
    # Of those, the mappings keyed by workload name (only a run of that workload reads its entry).
    by_workload: ClassVar[tuple[str, ...]] = ("data_dirs",)


# Every launcher (orch's and the vendor runners) by ``launcher.name`` -> its options model.
LAUNCHER_OPTIONS: Registry[type[LauncherOptions]] = Registry("launcher")

def _device_model() -> Any:
    return Field(None, description="The device model the adapter writes into the metrics file "
                                   "(default: the vendor's name for it).")


def _data_dirs(what: str) -> Any:
    return Field(default_factory=dict, description=f"Workload name -> its dataset {what} (a workload "
                                                   "not listed: the vendor example's own default).")


@LAUNCHER_OPTIONS.register("python")
class PythonOptions(LauncherOptions):
    """``python``: one process, no launcher. No options."""


@LAUNCHER_OPTIONS.register("single")
class SingleOptions(LauncherOptions):
    """``single``: one process that drives every device of the run."""

    via: Literal["srun"] | None = Field(
        None, description="srun: start the process as a one-task Slurm step (`srun --nodes=1 --ntasks=1`); "
                          "unset: start it directly.")


@LAUNCHER_OPTIONS.register("torchrun")
class TorchrunOptions(LauncherOptions):
    """``torchrun``: standalone on one node; one torchrun per node on several."""

    via: Literal["srun", "mpiexec"] | None = Field(
        None, description="What starts one torchrun per node on several nodes (unset: srun under Slurm, "
                          "mpiexec under PBS; another scheduler needs one of them to run on several nodes).")


@LAUNCHER_OPTIONS.register("srun")
class SrunOptions(LauncherOptions):
    """``srun``: one Slurm task per device. No options (extra srun arguments go in ``launcher.args``)."""


@LAUNCHER_OPTIONS.register("mpiexec")
class MpiexecOptions(LauncherOptions):
    """``mpiexec``: MPICH / Cray PALS, one rank per device. No options (extra arguments: ``launcher.args``)."""


@LAUNCHER_OPTIONS.register("mpirun")
class MpirunOptions(LauncherOptions):
    """``mpirun``: Intel MPI / Open MPI, one rank per device. No options (extra arguments: ``launcher.args``)."""


@LAUNCHER_OPTIONS.register("deepspeed")
class DeepSpeedOptions(LauncherOptions):
    """``deepspeed``: DeepSpeed's launcher."""

    multinode_launcher: Literal["pdsh", "openmpi", "mpich", "impi", "slurm", "mvapich"] | None = Field(
        None, description="DeepSpeed's `--launcher` on several nodes (its multinode runners; unset: slurm under "
                          "Slurm, mpich otherwise).")


@LAUNCHER_OPTIONS.register("gaudi_spawn")
class GaudiSpawnOptions(LauncherOptions):
    """``gaudi_spawn``: Habana's ``gaudi_spawn.py`` on one node."""

    input_paths = ("program",)  # run as `python <program>`
    program: str = Field("gaudi_spawn.py", description="Path of Habana's gaudi_spawn.py script.")
    mode: Literal["mpi", "deepspeed"] = Field(
        "mpi", description="How gaudi_spawn.py starts the ranks: mpi (`--use_mpi`) or deepspeed (`--use_deepspeed`).")


# ---------------------------------------------------------------- vendor runners (orchestrator/sites/vendors/)

@LAUNCHER_OPTIONS.register("cerebras")
class CerebrasOptions(LauncherOptions):
    """``cerebras``: the Cerebras model zoo's ``run.py CSX`` (``orchestrator/sites/vendors/cerebras.py``)."""

    # mount_dirs are mounted into the appliance's containers and python_paths exported into their
    # PYTHONPATH (the zoo's run argument parser): paths on the user node's shared file system.
    input_paths = ("modelzoo", "mount_dirs", "python_paths", "data_dirs")
    modelzoo: str = Field("modelzoo", description="Your clone of github.com/Cerebras/modelzoo.")
    model_dir: str = Field("model_dir", description="run.py's --model_dir (checkpoints and logs).")
    compile_dir: str = Field("compile_dir", description="run.py's --compile_dir.")
    mount_dirs: list[str] = Field(default_factory=list, description="run.py's --mount_dirs (none: not passed).")
    python_paths: list[str] = Field(default_factory=list, description="run.py's --python_paths (none: not passed).")
    data_dirs: dict[str, str] = _data_dirs("directory (the params file's train_input.data_dir)")
    device_model: str | None = _device_model()


@LAUNCHER_OPTIONS.register("sambaflow")
class SambaFlowOptions(LauncherOptions):
    """``sambaflow``: SambaNova's SambaFlow apps, compile then run (``orchestrator/sites/vendors/sambanova.py``)."""

    input_paths = ("apps", "data_dirs")
    apps: str = Field("/opt/sambaflow/apps", description="Where the SambaFlow apps are (on every SN30 node).")
    num_workers: int = Field(8, description="The apps' --num-workers (data loader processes).")
    unet_epochs: int = Field(10, description="Epochs of the UNet app (its example runs 10).")
    data_dirs: dict[str, str] = _data_dirs("directory")
    device_model: str | None = _device_model()


@LAUNCHER_OPTIONS.register("poptorch")
class PopTorchOptions(LauncherOptions):
    """``poptorch``: Graphcore's PopTorch examples (``orchestrator/sites/vendors/graphcore.py``)."""

    input_paths = ("examples", "data_dirs")
    examples: str = Field("graphcore/examples", description="Your clone of github.com/graphcore/examples.")
    resnet_epochs: int = Field(2, description="ResNet-50's --epoch (the example runs 2).")
    data_dirs: dict[str, str] = _data_dirs("path")
    device_model: str | None = _device_model()


@LAUNCHER_OPTIONS.register("groqflow")
class GroqFlowOptions(LauncherOptions):
    """``groqflow``: GroqFlow's proof points (``orchestrator/sites/vendors/groq.py``)."""

    input_paths = ("groqflow",)
    groqflow: str = Field("groqflow", description="Your clone of github.com/groq/groqflow.")
    device_model: str | None = _device_model()
