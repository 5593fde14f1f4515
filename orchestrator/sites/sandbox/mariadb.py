"""MariaDB for slurmdbd: started when none answers, with the accounting database and its user.

``down()`` leaves MariaDB running: other programs on the machine may use it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from orchestrator.sites.sandbox.errors import SandboxError
from orchestrator.sites.sandbox.facts import DB_NAME, DB_PACKAGES, DB_PASS, DB_USER
from orchestrator.sites.sandbox.packages import _apt_install
from orchestrator.sites.sandbox.proc import _run, _tail


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
    raise SandboxError("MariaDB did not answer within 60 s after starting it\n"
                       + _tail(Path("/var/log/mysql/error.log")))


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
