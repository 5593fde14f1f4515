"""A real Slurm cluster on this one machine, for tests and for trying orch out.

``up()`` installs what is missing (Debian packages), writes the configuration
under ``/etc/slurm``, and starts munged, slurmdbd (on MariaDB), slurmctld and
four ``slurmd`` processes that play the virtual nodes ``n1``..``n4`` (each with
four fake GPUs as ``gres/gpu``). Afterwards ``sinfo``, ``sbatch``, ``srun``,
``sacct`` and ``scancel`` work from any shell. ``down()`` stops the Slurm daemons
and munged (MariaDB is left alone: other programs may use it); ``status()``
reports what runs without changing anything.

Everything here needs root. The daemons outlive the Python process that started
them; ``up()`` is idempotent (a second call only checks, in well under a second).

Facts a site profile needs (``sites/sandbox.yaml``) are in :data:`FACTS`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError

__all__ = [
    "FACTS",
    "SandboxError",
    "SandboxStatus",
    "down",
    "restart_controller",
    "status",
    "up",
]

# --------------------------------------------------------------------------------------
# Layout and fixed facts
# --------------------------------------------------------------------------------------

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

PACKAGES = ("slurm-wlm", "slurmdbd", "munge")
# Packages needed only when no MariaDB answers.
DB_PACKAGES = ("mariadb-server", "mariadb-client")

UP_TIMEOUT_S = 120.0


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
        "memory_enforcement": "cgroup (task/cgroup, OUT_OF_MEMORY) where cgroup v1 memory is writable, else jobacct (OverMemoryKill)",
    }


FACTS = _facts()


class SandboxError(UserError, RuntimeError):
    """The sandbox cluster could not be brought up (the message says what and shows logs).

    A UserError so that the CLI prints the message (and log tails) without a traceback.
    """

    exit_code = 1


@dataclass
class SandboxStatus:
    munge: bool = False
    mariadb: bool = False
    slurmdbd: bool = False
    slurmctld: bool = False
    slurmd: dict[str, bool] = field(default_factory=dict)  # node -> its slurmd process runs
    nodes: dict[str, str] = field(default_factory=dict)  # node -> state as sinfo says (idle, mixed, ...)
    gres: dict[str, str] = field(default_factory=dict)  # node -> gres as sinfo says (gpu:4)
    partitions: list[str] = field(default_factory=list)
    default_partition: str | None = None
    sacct_ok: bool = False
    cluster: str = CLUSTER
    config_dir: str = str(CONF_DIR)
    log_dir: str = str(LOG_DIR)
    slurm_version: str | None = None
    # How a job over --mem is stopped: "cgroup" (kernel OOM killer; sacct OUT_OF_MEMORY)
    # or "jobacct" (RSS sampling kills it; sacct FAILED, signal 9). None: not configured.
    memory_enforcement: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Everything runs, every node is usable and accounting answers."""
        return (
            self.munge
            and self.slurmdbd
            and self.slurmctld
            and self.sacct_ok
            and set(self.nodes) == set(NODES)
            and all(_usable(s) for s in self.nodes.values())
            and all(self.slurmd.get(n, False) for n in NODES)
        )

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "munge": self.munge,
            "mariadb": self.mariadb,
            "slurmdbd": self.slurmdbd,
            "slurmctld": self.slurmctld,
            "slurmd": dict(self.slurmd),
            "nodes": dict(self.nodes),
            "gres": dict(self.gres),
            "partitions": list(self.partitions),
            "default_partition": self.default_partition,
            "sacct_ok": self.sacct_ok,
            "cluster": self.cluster,
            "config_dir": self.config_dir,
            "log_dir": self.log_dir,
            "slurm_version": self.slurm_version,
            "memory_enforcement": self.memory_enforcement,
            "problems": list(self.problems),
        }


_USABLE_STATES = {"idle", "mixed", "allocated", "completing"}


def _usable(state: str) -> bool:
    return state.rstrip("*~#!%$@^-+").lower() in _USABLE_STATES and not state.endswith("*")


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def _run(cmd: list[str], timeout: float = 30, check: bool = False, env: dict | None = None,
         input: str | None = None) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, input=input)
    except FileNotFoundError as e:
        cp = subprocess.CompletedProcess(cmd, 127, "", str(e))
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        cp = subprocess.CompletedProcess(cmd, 124, out, f"timed out after {timeout}s")
    if check and cp.returncode != 0:
        raise SandboxError(
            f"command failed ({cp.returncode}): {' '.join(cmd)}\n{(cp.stdout or '')[-2000:]}{(cp.stderr or '')[-2000:]}"
        )
    return cp


def _clean_env() -> dict:
    # Commands run here must not see the variables of a job we might be running inside.
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return f"--- last {min(n, len(lines))} lines of {path} ---\n" + "\n".join(lines[-n:])


def _pid_alive(pidfile: Path, comm: str) -> int | None:
    """Pid from the pid file if that process runs and is ``comm``; else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        actual = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    if not comm.startswith(actual) and not actual.startswith(comm[:15]):
        return None
    return pid


def _slurmd_pidfile(node: str) -> Path:
    return RUN_DIR / f"slurmd-{node}.pid"


def _slurmd_log(node: str) -> Path:
    return LOG_DIR / f"slurmd-{node}.log"


def _stop_pid(pid: int, timeout: float = 15) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return
        try:
            # Reap it if it is our child (it is not, when daemonised; harmless).
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
            if state == "Z":
                return
        except (OSError, IndexError):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _require_root() -> None:
    if os.geteuid() != 0:
        raise SandboxError(
            "the Slurm sandbox needs root (it installs packages, writes /etc/slurm and starts "
            "munged, slurmdbd, slurmctld and slurmd); run `orch sandbox up` as root"
        )


def _hostname() -> str:
    return socket.gethostname().split(".")[0]


# --------------------------------------------------------------------------------------
# Configuration text
# --------------------------------------------------------------------------------------


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


def _plugins_conf(mode: str) -> str:
    if mode == "cgroup":
        return "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
    return "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none"


def _acct_gather_conf(mode: str) -> str:
    if mode == "cgroup":
        return (
            "# Memory enforcement by the kernel: task/cgroup puts each step in a memory cgroup\n"
            "# limited to --mem; the OOM killer stops it and sacct says OUT_OF_MEMORY.\n"
            "# (jobacct_gather/cgroup reports MaxRSS 0 here; /proc sampling gives real numbers.)\n"
            "JobAcctGatherType=jobacct_gather/linux\n"
            "JobAcctGatherFrequency=task=1"
        )
    return (
        "# Memory enforcement without cgroups: slurmstepd samples RSS every second and kills\n"
        "# a step over --mem (sacct then says FAILED 0:9, the batch step CANCELLED).\n"
        "JobAcctGatherType=jobacct_gather/linux\n"
        "JobAcctGatherFrequency=task=1\n"
        "JobAcctGatherParams=OverMemoryKill"
    )


def _cgroup_conf(mode: str) -> str:
    if mode != "cgroup":
        return f"{CONF_MARK}\n# cgroups are not used on this machine (see slurm.conf).\n"
    return f"""{CONF_MARK}
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=yes
AllowedRAMSpace=100
ConstrainSwapSpace=yes
AllowedSwapSpace=0
"""


def _slurm_conf(mode: str | None = None) -> str:
    mode = mode or _memory_mode()
    host = _hostname()
    cpus = _cpus_per_node()
    mem = _node_mem_mb()
    parts = []
    for name, (mx, dflt, is_default) in PARTITIONS.items():
        parts.append(
            f"PartitionName={name} Nodes={NODE_SPEC} Default={'YES' if is_default else 'NO'} "
            f"MaxTime={mx} DefaultTime={dflt} State=UP OverSubscribe=NO"
        )
    return f"""{CONF_MARK}
ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
{_plugins_conf(mode)}
SwitchType=switch/none
ReturnToService=2
StateSaveLocation={STATE_DIR}/ctld
SlurmdSpoolDir={STATE_DIR}/d/%n
SlurmctldPidFile={CTLD_PID}
SlurmdPidFile={RUN_DIR}/slurmd-%n.pid
SlurmctldLogFile={CTLD_LOG}
SlurmdLogFile={LOG_DIR}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
SlurmdParameters=config_overrides
# Scheduling: small timers so tests are fast.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=2,sched_min_interval=100000,batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={mem // cpus}
EnforcePartLimits=ALL
MaxArraySize={MAX_ARRAY_SIZE}
MaxJobCount={MAX_JOB_COUNT}
MinJobAge=10
KillWait=2
OverTimeLimit=0
InactiveLimit=0
Waittime=0
MessageTimeout=10
SlurmctldTimeout=30
SlurmdTimeout=60
UnkillableStepTimeout=30
# Accounting (sacct) through slurmdbd.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={DBD_PORT}
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
{_acct_gather_conf(mode)}
# Fake GPUs (see gres.conf).
GresTypes=gpu
NodeName={NODE_SPEC} NodeHostname={host} NodeAddr=127.0.0.1 Port={SLURMD_BASE_PORT}-{SLURMD_BASE_PORT + len(NODES) - 1} CPUs={cpus} RealMemory={mem} Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN
{chr(10).join(parts)}
"""


def _gres_conf() -> str:
    lines = [CONF_MARK, "AutoDetect=off"]
    for f in FAKE_GPU_FILES[:GPUS_PER_NODE]:
        lines.append(f"NodeName={NODE_SPEC} Name=gpu File={f}")
    return "\n".join(lines) + "\n"


def _dbd_conf() -> str:
    return f"""{CONF_MARK}
AuthType=auth/munge
DbdHost=localhost
DbdPort={DBD_PORT}
SlurmUser=root
DebugLevel=info
LogFile={DBD_LOG}
PidFile={DBD_PID}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser={DB_USER}
StoragePass={DB_PASS}
StorageLoc={DB_NAME}
"""


def _write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    try:
        if path.read_text() == text:
            if (path.stat().st_mode & 0o777) != mode:
                path.chmod(mode)
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".orch-tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


# --------------------------------------------------------------------------------------
# Packages
# --------------------------------------------------------------------------------------

_apt_updated = False


def _apt_install(packages: list[str]) -> None:
    global _apt_updated
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not shutil.which("apt-get"):
        raise SandboxError(f"missing packages {packages} and no apt-get to install them (Debian/Ubuntu only)")
    if not _apt_updated:
        cp = _run(["apt-get", "update", "-q"], timeout=600, env=env)
        if cp.returncode != 0:
            raise SandboxError(f"apt-get update failed:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")
        _apt_updated = True
    cp = _run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], timeout=1200, env=env)
    if cp.returncode != 0:
        raise SandboxError(f"apt-get install {' '.join(packages)} failed:\n{cp.stdout[-1500:]}{cp.stderr[-1500:]}")


def _ensure_packages() -> None:
    needed = {
        "slurmctld": "slurmctld",
        "slurmd": "slurmd",
        "sbatch": "slurm-client",
        "slurmdbd": "slurmdbd",
        "munged": "munge",
    }
    missing = sorted({pkg for exe, pkg in needed.items() if not shutil.which(exe, path="/usr/sbin:/usr/bin")})
    if not Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so").exists() and not any(
        Path("/usr/lib").glob("*/slurm-wlm/accounting_storage_mysql.so")
    ):
        missing.append("slurm-wlm-mysql-plugin")
    if missing:
        _apt_install(sorted(set(missing) | {"slurm-wlm", "slurmdbd", "munge"}))


# --------------------------------------------------------------------------------------
# munge
# --------------------------------------------------------------------------------------


def _munge_ok() -> bool:
    cp = _run(["munge", "-n"], timeout=10)
    if cp.returncode != 0:
        return False
    return _run(["unmunge"], timeout=10, input=cp.stdout).returncode == 0


def _ensure_munge() -> None:
    if _pid_alive(MUNGE_PID, "munged") and _munge_ok():
        return
    for d, mode in ((Path("/etc/munge"), 0o700), (Path("/var/lib/munge"), 0o700),
                    (Path("/var/log/munge"), 0o700), (Path("/run/munge"), 0o755)):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "munge", "munge")
        d.chmod(mode)
    if not MUNGE_KEY.exists():
        if shutil.which("mungekey", path="/usr/sbin:/usr/bin"):
            _run(["mungekey", "--create", f"--keyfile={MUNGE_KEY}"], check=True)
        else:
            MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    # A stale socket or pid file from a killed munged stops a new one.
    if not _pid_alive(MUNGE_PID, "munged"):
        for stale in (MUNGE_PID, Path("/run/munge/munge.socket.2"), Path("/run/munge/munge.socket.2.lock")):
            stale.unlink(missing_ok=True)
        cp = _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], timeout=30)
        if cp.returncode != 0:
            raise SandboxError(f"munged did not start: {cp.stderr.strip()}\n{_tail(MUNGE_LOG)}")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _munge_ok():
            return
        time.sleep(0.2)
    raise SandboxError(f"munged runs but `munge -n | unmunge` fails\n{_tail(MUNGE_LOG)}")


# --------------------------------------------------------------------------------------
# MariaDB
# --------------------------------------------------------------------------------------


def _mysql(sql: str, timeout: float = 15) -> subprocess.CompletedProcess:
    """Run SQL as the database's root: the unix socket first, then TCP 127.0.0.1."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    if not client:
        return subprocess.CompletedProcess([], 127, "", "no mariadb/mysql client")
    cp = _run([client, "-uroot", "-N", "-B", "-e", sql], timeout=timeout)
    if cp.returncode == 0:
        return cp
    cp2 = _run([client, "-uroot", "-h127.0.0.1", "-P3306", "-N", "-B", "-e", sql], timeout=timeout)
    if cp2.returncode == 0:
        return cp2
    return subprocess.CompletedProcess(cp.args, cp.returncode, cp.stdout, cp.stderr + cp2.stderr)


def _mariadb_ok() -> bool:
    return _mysql("SELECT 1", timeout=5).returncode == 0


def _ensure_mariadb() -> None:
    if _mariadb_ok():
        return
    if not (shutil.which("mariadbd", path="/usr/sbin:/usr/bin") or shutil.which("mysqld", path="/usr/sbin:/usr/bin")):
        _apt_install(list(DB_PACKAGES))
        if _mariadb_ok():  # the package's postinst may have started it
            return
    run_dir = Path("/run/mysqld")
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "mysql", "mysql")
    datadir = Path("/var/lib/mysql")
    if not (datadir / "mysql").is_dir():
        installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        if installer:
            _run([installer, "--user=mysql", f"--datadir={datadir}"], timeout=300, check=True)
    Path("/var/log/mysql").mkdir(parents=True, exist_ok=True)
    shutil.chown("/var/log/mysql", "mysql", "adm" if _group_exists("adm") else "mysql")
    safe = shutil.which("mysqld_safe", path="/usr/bin:/usr/sbin")
    if safe:
        cmd = [safe]
    else:
        cmd = [shutil.which("mariadbd", path="/usr/sbin:/usr/bin") or "/usr/sbin/mariadbd", "--user=mysql"]
    subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _mariadb_ok():
            return
        time.sleep(0.5)
    raise SandboxError("MariaDB did not answer within 60 s after starting it\n" + _tail(Path("/var/log/mysql/error.log")))


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def _ensure_database() -> None:
    sql = (
        f"CREATE DATABASE IF NOT EXISTS {DB_NAME};"
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASS}';"
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}';"
        f"ALTER USER '{DB_USER}'@'localhost' IDENTIFIED BY '{DB_PASS}';"
        f"ALTER USER '{DB_USER}'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}';"
        f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost';"
        f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'127.0.0.1';"
        "FLUSH PRIVILEGES;"
    )
    cp = _mysql(sql)
    if cp.returncode != 0:
        raise SandboxError(f"could not create the accounting database/user in MariaDB: {cp.stderr.strip()}")


def _database_ready() -> bool:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if not client:
        return False
    cp = _run([client, f"-u{DB_USER}", f"-p{DB_PASS}", "-h127.0.0.1", "-P3306", "-N", "-B", "-e",
               f"USE {DB_NAME}; SELECT 1"], timeout=5)
    return cp.returncode == 0


# --------------------------------------------------------------------------------------
# Slurm daemons
# --------------------------------------------------------------------------------------


def _dirs() -> None:
    for d in (STATE_DIR / "ctld", LOG_DIR, RUN_DIR, *(STATE_DIR / "d" / n for n in NODES)):
        d.mkdir(parents=True, exist_ok=True)


def _sacct_ok() -> bool:
    cp = _run(["sacct", "-n", "-X", "-P", "-o", "JobID", "-S", "now-1minutes", "-E", "now"], timeout=15,
              env=_clean_env())
    return cp.returncode == 0


def _sacctmgr_ok() -> bool:
    cp = _run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=15, env=_clean_env())
    return cp.returncode == 0


def _start_slurmdbd() -> None:
    if _pid_alive(DBD_PID, "slurmdbd"):
        return
    cp = _run(["/usr/sbin/slurmdbd"], timeout=30, env=_clean_env())
    if cp.returncode != 0:
        raise SandboxError(f"slurmdbd did not start: {cp.stderr.strip()}\n{_tail(DBD_LOG)}")


def _wait_dbd() -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _sacctmgr_ok():
            return
        if not _pid_alive(DBD_PID, "slurmdbd") and time.monotonic() > deadline - 50:
            raise SandboxError("slurmdbd exited after starting\n" + _tail(DBD_LOG))
        time.sleep(0.5)
    raise SandboxError("slurmdbd did not answer `sacctmgr show cluster` within 60 s\n" + _tail(DBD_LOG))


def _ensure_cluster_registered() -> bool:
    cp = _run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=15, env=_clean_env())
    if CLUSTER in cp.stdout.split():
        return False
    cp = _run(["sacctmgr", "-i", "add", "cluster", CLUSTER], timeout=30, env=_clean_env())
    if cp.returncode != 0 and "already exists" not in (cp.stdout + cp.stderr):
        raise SandboxError(f"sacctmgr add cluster {CLUSTER} failed: {cp.stdout}{cp.stderr}\n{_tail(DBD_LOG)}")
    return True


def _start_slurmctld() -> None:
    if _pid_alive(CTLD_PID, "slurmctld"):
        return
    cp = _run(["/usr/sbin/slurmctld"], timeout=60, env=_clean_env())
    if cp.returncode != 0:
        raise SandboxError(f"slurmctld did not start: {cp.stderr.strip()}\n{_tail(CTLD_LOG)}")


def _stop_slurmctld() -> None:
    pid = _pid_alive(CTLD_PID, "slurmctld")
    if pid:
        _stop_pid(pid, timeout=30)


def _ctld_ping() -> bool:
    cp = _run(["scontrol", "ping"], timeout=15, env=_clean_env())
    return cp.returncode == 0 and "UP" in cp.stdout


def _wait_ctld() -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _ctld_ping():
            return
        if not _pid_alive(CTLD_PID, "slurmctld"):
            time.sleep(0.5)
            if not _pid_alive(CTLD_PID, "slurmctld") and not _ctld_ping():
                raise SandboxError("slurmctld exited after starting\n" + _tail(CTLD_LOG))
        time.sleep(0.3)
    raise SandboxError("slurmctld did not answer `scontrol ping` within 60 s\n" + _tail(CTLD_LOG))


def _start_slurmd(node: str) -> None:
    if _pid_alive(_slurmd_pidfile(node), "slurmd"):
        return
    cp = _run(["/usr/sbin/slurmd", "-N", node], timeout=60, env=_clean_env())
    if cp.returncode != 0:
        raise SandboxError(f"slurmd -N {node} did not start: {cp.stderr.strip()}\n{_tail(_slurmd_log(node))}")


def _stop_slurmd(node: str) -> None:
    pid = _pid_alive(_slurmd_pidfile(node), "slurmd")
    if pid:
        _stop_pid(pid, timeout=30)


def _sinfo_nodes() -> tuple[dict[str, str], dict[str, str], list[str], str | None, dict[str, str]]:
    """(node -> state, node -> gres, partitions, default partition, node -> reason) from one sinfo call."""
    cp = _run(["sinfo", "-N", "-h", "-o", "%N|%T|%G|%P|%E"], timeout=15, env=_clean_env())
    states: dict[str, str] = {}
    gres: dict[str, str] = {}
    reasons: dict[str, str] = {}
    parts: list[str] = []
    default = None
    if cp.returncode != 0:
        return states, gres, parts, default, reasons
    for line in cp.stdout.splitlines():
        bits = line.split("|")
        if len(bits) < 5:
            continue
        node, state, g, part, reason = bits[:5]
        states[node] = state
        gres[node] = g
        if reason and reason != "none":
            reasons[node] = reason
        if part.endswith("*"):
            part = part[:-1]
            default = part
        if part not in parts:
            parts.append(part)
    return states, gres, parts, default, reasons


def _wait_nodes(timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    resumed: set[str] = set()
    restarted = False
    states: dict[str, str] = {}
    reasons: dict[str, str] = {}
    while time.monotonic() < deadline:
        states, _, _, _, reasons = _sinfo_nodes()
        if set(states) == set(NODES) and all(_usable(s) for s in states.values()):
            return
        for node, state in states.items():
            base = state.rstrip("*~#!%$@^-+").lower()
            if base == "inval" and not restarted:
                # Nodes that registered INVAL need slurmctld restarted, not scontrol update.
                restarted = True
                _stop_slurmctld()
                _start_slurmctld()
                _wait_ctld()
                break
            if (base in ("down", "drained", "draining", "drain", "fail", "failing")
                    and not state.endswith("*") and node not in resumed):
                resumed.add(node)
                _run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=15, env=_clean_env())
        time.sleep(0.5)
    detail = ", ".join(f"{n}={s}" + (f" ({reasons[n]})" if n in reasons else "") for n, s in sorted(states.items()))
    logs = "\n".join(_tail(_slurmd_log(n), 8) for n in NODES)
    raise SandboxError(
        f"nodes did not become idle within {timeout:.0f} s: {detail or 'sinfo shows none'}\n{_tail(CTLD_LOG, 15)}\n{logs}"
    )


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------


def status() -> SandboxStatus:
    """What runs now; changes nothing."""
    st = SandboxStatus()
    env = _clean_env()
    st.munge = bool(_pid_alive(MUNGE_PID, "munged")) and (shutil.which("munge") is not None) and _munge_ok()
    st.mariadb = _mariadb_ok() if os.geteuid() == 0 else _port_open(3306)
    st.slurmdbd = bool(_pid_alive(DBD_PID, "slurmdbd"))
    st.slurmctld = bool(_pid_alive(CTLD_PID, "slurmctld"))
    st.slurmd = {n: bool(_pid_alive(_slurmd_pidfile(n), "slurmd")) for n in NODES}
    try:
        conf = SLURM_CONF.read_text()
        if CONF_MARK in conf:
            st.memory_enforcement = "cgroup" if "TaskPlugin=task/cgroup" in conf else "jobacct"
    except OSError:
        pass
    if shutil.which("sinfo"):
        ver = _run(["sinfo", "--version"], timeout=10, env=env)
        st.slurm_version = ver.stdout.strip().split()[-1] if ver.stdout.strip() else None
        if st.slurmctld:
            st.nodes, st.gres, st.partitions, st.default_partition, reasons = _sinfo_nodes()
            for n, r in reasons.items():
                st.problems.append(f"node {n} is {st.nodes.get(n)}: {r}")
        if st.slurmdbd:
            st.sacct_ok = _sacct_ok()
    if not st.munge:
        st.problems.append("munged is not running")
    if not st.slurmdbd:
        st.problems.append("slurmdbd is not running")
    elif not st.sacct_ok:
        st.problems.append("sacct does not answer")
    if not st.slurmctld:
        st.problems.append("slurmctld is not running")
    for n, alive in st.slurmd.items():
        if not alive:
            st.problems.append(f"slurmd for {n} is not running")
    return st


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _configs_current(mode: str) -> bool:
    try:
        return (
            SLURM_CONF.read_text() == _slurm_conf(mode)
            and CGROUP_CONF.read_text() == _cgroup_conf(mode)
            and GRES_CONF.read_text() == _gres_conf()
            and DBD_CONF.read_text() == _dbd_conf()
        )
    except OSError:
        return False


def up(like: str | None = None) -> SandboxStatus:
    """Bring the sandbox cluster up (idempotent); return its status or raise SandboxError."""
    if like is not None:
        raise NotImplementedError(
            f"`sandbox up --like {like}` (a twin of a real site's partitions, accounts and limits) "
            "is not implemented yet; run `orch sandbox up` without --like"
        )
    _require_root()
    mode = _memory_mode()
    # Fast path: nothing to do.
    if _configs_current(mode):
        st = status()
        if st.ok:
            return st

    _ensure_packages()
    _dirs()
    slurm_changed = _write_if_changed(SLURM_CONF, _slurm_conf(mode))
    slurm_changed |= _write_if_changed(GRES_CONF, _gres_conf())
    slurm_changed |= _write_if_changed(CGROUP_CONF, _cgroup_conf(mode))
    dbd_changed = _write_if_changed(DBD_CONF, _dbd_conf(), mode=0o600)

    _ensure_munge()
    _ensure_mariadb()
    if not _database_ready():
        _ensure_database()

    if dbd_changed:
        pid = _pid_alive(DBD_PID, "slurmdbd")
        if pid:
            _stop_pid(pid)
    _start_slurmdbd()
    _wait_dbd()
    registered_now = _ensure_cluster_registered()

    if slurm_changed or registered_now:
        # New node/partition definitions need daemons restarted, not reconfigured.
        for n in NODES:
            _stop_slurmd(n)
        _stop_slurmctld()
    _start_slurmctld()
    _wait_ctld()
    for n in NODES:
        _start_slurmd(n)
    _wait_nodes()

    deadline = time.monotonic() + 30
    while not _sacct_ok():
        if time.monotonic() > deadline:
            raise SandboxError("sacct does not answer although slurmdbd runs\n" + _tail(DBD_LOG) + "\n" + _tail(CTLD_LOG))
        time.sleep(0.5)
    st = status()
    if not st.ok:
        raise SandboxError("sandbox came up incompletely: " + "; ".join(st.problems or ["nodes not usable"]))
    return st


def down() -> None:
    """Stop the Slurm daemons and munged (MariaDB keeps running). Job state is kept on disk."""
    _require_root()
    for n in NODES:
        _stop_slurmd(n)
    _stop_slurmctld()
    pid = _pid_alive(DBD_PID, "slurmdbd")
    if pid:
        _stop_pid(pid)
    pid = _pid_alive(MUNGE_PID, "munged")
    if pid:
        _stop_pid(pid)


def restart_controller(wait: bool = True) -> None:
    """Stop and start slurmctld (state is kept: queued and running jobs survive)."""
    _require_root()
    _stop_slurmctld()
    _start_slurmctld()
    if wait:
        _wait_ctld()
        _wait_nodes()
