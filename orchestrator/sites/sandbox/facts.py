"""The sandbox's fixed facts (names, paths, ports, limits) and what it learns of this host.

Every module of the package takes its constants from here. The host probes (CPUs, memory,
hostname, a C compiler, a usable cgroup v1) are called through this module
(``facts._cpus_per_node()``), never imported by name, so that one monkeypatch fixes a fact
for all of them: tests/sites/test_sandbox_configs.py renders the configuration files of a
made-up host and compares them, byte for byte, with golden files.

Facts a site profile needs (``sites/sandbox.yaml``) are in :data:`FACTS`.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

CLUSTER = "sandbox"
CONF_DIR = Path("/etc/slurm")
SLURM_CONF = CONF_DIR / "slurm.conf"
GRES_CONF = CONF_DIR / "gres.conf"
CGROUP_CONF = CONF_DIR / "cgroup.conf"
DBD_CONF = CONF_DIR / "slurmdbd.conf"
STATE_DIR = Path("/var/lib/orch-slurm")
LOG_DIR = Path("/var/log/orch-slurm")
RUN_DIR = Path("/run/orch-slurm")
CTLD_PID = RUN_DIR / "slurmctld.pid"
DBD_PID = RUN_DIR / "slurmdbd.pid"
CTLD_LOG = LOG_DIR / "slurmctld.log"
DBD_LOG = LOG_DIR / "slurmdbd.log"
MUNGE_PID = Path("/run/munge/munged.pid")
MUNGE_LOG = Path("/var/log/munge/munged.log")
MUNGE_KEY = Path("/etc/munge/munge.key")

NODES = ("n1", "n2", "n3", "n4")
NODE_SPEC = "n[1-4]"
GPUS_PER_NODE = 4
# Distinct existing device files stand in for GPUs (gres needs a File per device).
FAKE_GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")
SLURMD_BASE_PORT = 17001
CTLD_PORT = 6817
DBD_PORT = 6819
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
DB_PASS = "orch-sandbox"  # bound to 127.0.0.1 only; a sandbox, not a secret
MAX_ARRAY_SIZE = 1001  # array indices 0..1000
MAX_JOB_COUNT = 20000
PARTITIONS = {
    # name: (max walltime, default walltime, default partition?)
    "debug": ("01:00:00", "00:30:00", True),
    "batch": ("1-00:00:00", "01:00:00", False),
}
CONF_MARK = "# Written by orch.sandbox; orch sandbox up rewrites it."

# Site twins (``up(like=SITE)``).
# The twin's own SPANK stack (PlugStackConfig in a twin's slurm.conf; the plain sandbox keeps
# Slurm's default /etc/slurm/plugstack.conf, which Debian ships).
PLUGSTACK_CONF = CONF_DIR / "orch-twin-plugstack.conf"
LAYOUT_FILE = STATE_DIR / "layout.json"  # the layout the files in /etc/slurm were written for
FAKEDEV_DIR = STATE_DIR / "fakedev"  # stand-in device files for more than 4 fake GPUs per node
SPANK_DIR = STATE_DIR / "spank"
TWIN_MAX_NODES = 16  # virtual nodes per node group (one group per Slurm system of the site)
TWIN_MAX_TOTAL_NODES = 32
# Memory a twin's node claims per CPU when its profile gives no node.memory_gb.
TWIN_DEFAULT_MEM_PER_CPU_MB = 2048
# Accounts and QoS the twin creates when the site needs one and the environment names none.
STAND_IN_ACCOUNT = "orch-twin"
STAND_IN_QOS = "orch-twin"
PARTITION_QOS_PREFIX = "orch-twin-part-"
ENFORCE = "associations,limits,qos"

PACKAGES = ("slurm-wlm", "slurmdbd", "munge")
# Packages needed only when no MariaDB answers.
DB_PACKAGES = ("mariadb-server", "mariadb-client")

UP_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------------------
# The host (called through this module: a test fixes them with one monkeypatch each)
# --------------------------------------------------------------------------------------


def _cpus_per_node() -> int:
    return max(2, os.cpu_count() or 2)


def _host_mem_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 8192


def _node_mem_mb() -> int:
    # The four virtual nodes share the host: together they claim 80% of it.
    return max(1024, int(_host_mem_mb() * 0.8 / len(NODES)))


def _hostname() -> str:
    return socket.gethostname().split(".")[0]


def _c_compiler() -> str | None:
    """The C compiler that builds the --ipus SPANK plugin (cc, else gcc); None when there is none.

    A twin of a Graphcore site loads the plugin only where it can be built, so the layout
    (and with it slurm.conf) depends on this."""
    return shutil.which("cc") or shutil.which("gcc")


def _cgroup_v1_memory_usable() -> bool:
    """Whether this machine has a writable cgroup v1 memory controller that enforces limits.

    Slurm 22.05's cgroup/v1 plugin needs /sys/fs/cgroup/{memory,freezer,...} as v1
    hierarchies; containers often have none, or a read-only one.
    """
    mem = Path("/sys/fs/cgroup/memory")
    if not (mem / "memory.limit_in_bytes").exists() or not Path("/sys/fs/cgroup/freezer/tasks").exists():
        return False
    probe = mem / f"orch-probe-{os.getpid()}"
    try:
        probe.mkdir()
        try:
            (probe / "memory.limit_in_bytes").write_text(str(64 * 1024 * 1024))
            return int((probe / "memory.limit_in_bytes").read_text()) <= 64 * 1024 * 1024
        finally:
            probe.rmdir()
    except OSError:
        return False


def _memory_mode() -> str:
    """How jobs over --mem are stopped: "cgroup" (kernel OOM killer, sacct OUT_OF_MEMORY)
    or "jobacct" (slurmstepd samples RSS and kills the step; sacct says FAILED/CANCELLED).

    ORCH_SANDBOX_MEMORY=cgroup|jobacct overrides the probe.
    """
    forced = os.environ.get("ORCH_SANDBOX_MEMORY", "").strip().lower()
    if forced in ("cgroup", "jobacct"):
        return forced
    return "cgroup" if _cgroup_v1_memory_usable() else "jobacct"


# --------------------------------------------------------------------------------------
# What a site profile needs to know (sites/sandbox.yaml)
# --------------------------------------------------------------------------------------


def _facts() -> dict:
    cpus = _cpus_per_node()
    mem = _node_mem_mb()
    return {
        "cluster": CLUSTER,
        "scheduler": "slurm",
        "nodes": list(NODES),
        "node_count": len(NODES),
        "cpus_per_node": cpus,
        "memory_mb_per_node": mem,
        "default_mem_per_cpu_mb": mem // cpus,
        "gres": f"gpu:{GPUS_PER_NODE}",
        "gpus_per_node": GPUS_PER_NODE,
        "partitions": {
            name: {"max_walltime": mx, "default_walltime": dflt, "default": d, "nodes": len(NODES)}
            for name, (mx, dflt, d) in PARTITIONS.items()
        },
        "default_partition": next(n for n, p in PARTITIONS.items() if p[2]),
        # MaxArraySize=1001 allows indices 0..1000, so arrays of up to 1001 tasks.
        "max_array_size": MAX_ARRAY_SIZE,
        "max_job_count": MAX_JOB_COUNT,
        "accounting": True,
        "memory_enforcement": ("cgroup (task/cgroup, OUT_OF_MEMORY) where cgroup v1 memory is writable, "
                               "else jobacct (OverMemoryKill)"),
    }


FACTS = _facts()
