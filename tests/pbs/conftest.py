"""The PBS Pro command emulator on PATH (qsub, qstat, qdel), one fresh server per test."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SAMPLES = HERE / "samples"
COMMANDS = ("qsub", "qstat", "qdel", "qrerun")


def gate(tmp_path: Path) -> tuple[str, Path]:
    """A job body that holds its slot until the test opens the gate (touches the file): a job that
    must still run when the test looks, however long a busy machine takes to get there."""
    opened = tmp_path / "gate-open"
    return f"while [ ! -e {opened} ]; do sleep 0.1; done", opened


@dataclass
class PbsEmulator:
    home: Path
    bin: Path
    log: Path

    def calls(self, name: str | None = None) -> list[list[str]]:
        """Every command invocation so far (``[name, *argv]``), optionally of one command."""
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [r for r in rows if name is None or r[0] == name]

    def record(self, seq: int) -> dict:
        return json.loads((self.home / "jobs" / f"{seq}.json").read_text())

    def env(self) -> dict[str, str]:
        """What a subprocess needs to see this emulator (PATH first, PBS_EMU_*)."""
        return {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", "PBS_EMU_HOME": str(self.home),
                "PBS_EMU_LOG": str(self.log)}

    def wait_all(self, timeout: float = 60) -> None:
        """Until every job of this server has finished."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            states = [json.loads(p.read_text())["attrs"]["job_state"] for p in (self.home / "jobs").glob("*.json")]
            if all(s == "F" for s in states):
                return
            time.sleep(0.1)
        raise TimeoutError("PBS emulator jobs still running")


def _install(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(HERE)!r})\n"
                        f"import pbs_emulator\nsys.exit(pbs_emulator.main({name!r}, sys.argv[1:]))\n")
        path.chmod(0o755)


@pytest.fixture
def pbs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh emulated PBS server; its commands first on PATH for this test and its subprocesses."""
    emu = PbsEmulator(home=tmp_path / "pbs-server", bin=tmp_path / "pbs-bin", log=tmp_path / "pbs-calls.log")
    _install(emu.bin)
    for key, value in emu.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PBS_EMU_KILL_DELAY", "1")
    monkeypatch.chdir(tmp_path)  # qsub's default -o/-e go to the submit directory
    yield emu
    # Stop whatever this test's jobs left running (by their recorded session ids).
    for path in (emu.home / "jobs").glob("*.json"):
        rec = json.loads(path.read_text())
        for attrs in [rec["attrs"], *rec["subjobs"].values()]:
            if attrs.get("job_state") in ("R", "E") and attrs.get("session_id"):
                try:
                    os.killpg(int(attrs["session_id"]), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
