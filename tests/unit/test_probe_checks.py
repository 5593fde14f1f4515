"""The site probe's verdict (orchestrator/run/probe_checks.py), the profile hash it is stored with
(orchestrator/sites/fingerprint.py) and its table (migration 0009), without a job."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from orchestrator.run.probe_checks import CHECKS, FIX_SHARED_FS, Expected, JobEnd, judge, setup_modules
from orchestrator.sites.fingerprint import fingerprint
from tests.conftest import REPO, write

EXPECTED = Expected(token="t0k", nodes=1, ranks=2, device_type="cuda", python="/sw/bin/python", backend="nccl",
                    run_dir="/home/u/.orch/probes/x/1", modules=["cuda", "PyTorch/2.3"],
                    stdout="/home/u/.orch/probes/x/1/stdout.log", stderr="/home/u/.orch/probes/x/1/stderr.log")
GOOD: dict[str, Any] = {
    "python": {"executable": "/sw/bin/python", "version": "3.11.7"},
    "torch": "2.3.0", "torch_error": None, "deepspeed": None, "deepspeed_error": "ModuleNotFoundError: No module "
                                                                                "named 'deepspeed'",
    "devices": {"type": "cuda", "count": 4, "names": ["NVIDIA A100"] * 4, "error": None},
    "allreduce": {"ok": True, "backend": "nccl", "ranks": 2, "busbw_gbs": 150.0, "error": None},
    "run_dir": {"path": "/home/u/.orch/probes/x/1/probe-marker.txt", "token": "t0k", "error": None},
    "modules": ["cuda/12.2", "PyTorch/2.3", "gcc/12"],
    "nodes": ["gpu01"], "ranks": [{"hostname": "gpu01"}, {"hostname": "gpu01"}],
}
DONE = JobEnd("completed", exit_code=0)


def verdict(report: dict[str, Any] | None, **changes: Any) -> dict[str, Any]:
    checks = judge(report, EXPECTED, DONE, wrote_logs=True) if not changes else judge(
        report, Expected(**{**EXPECTED.__dict__, **changes}), DONE, wrote_logs=True)
    assert [c.name for c in checks] == list(CHECKS)
    return {c.name: c for c in checks}


def changed(path: str, value: Any) -> dict[str, Any]:
    report = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = report
    for key in parents:
        node = node[key]
    node[last] = value
    return report


def test_a_good_report_passes_every_check() -> None:
    checks = verdict(GOOD)
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert checks["allreduce"].value == 150.0 and checks["deepspeed"].value == "absent"
    assert checks["run_dir_visible"].value is True and checks["nodes"].value == 1


@pytest.mark.parametrize(("path", "value", "failing", "words"), [
    ("torch", None, "torch", "install PyTorch for /sw/bin/python"),
    ("devices.type", "cpu", "devices", "with a PyTorch built for cuda"),
    ("devices.count", 0, "devices", "ask for the cuda devices"),
    ("devices.error", "Refused: device 'cuda' is not available", "devices", "ask for the cuda devices"),
    ("allreduce.ok", False, "allreduce", "MASTER_ADDR"),
    ("allreduce.ranks", 1, "allreduce", "another number of processes"),
    ("nodes", ["gpu01", "gpu02"], "nodes", "spread"),
    ("run_dir.token", "an-older-token", "run_dir_visible", "ORCH_HOME"),
    ("modules", ["gcc/12"], "modules", "module avail"),
    ("deepspeed_error", "RuntimeError: compiled against another torch", "deepspeed", "reinstall DeepSpeed"),
])
def test_each_failure_names_its_check_and_a_fix(path: str, value: Any, failing: str, words: str) -> None:
    checks = verdict(changed(path, value))
    assert not checks[failing].ok and words in checks[failing].fix, checks[failing]
    # Only that check fails; without torch nothing can look for devices or reduce either.
    also = {"devices", "allreduce"} if failing == "torch" else set()
    assert {name for name, c in checks.items() if not c.ok} == {failing} | also


def test_no_report_and_nothing_written_says_the_run_directory_is_not_seen() -> None:
    checks = {c.name: c for c in judge(None, EXPECTED, JobEnd("failed", "script exited with 1", 1), False)}
    assert not checks["run_dir_visible"].ok and checks["run_dir_visible"].fix == FIX_SHARED_FS
    assert not checks["python"].ok and EXPECTED.run_dir in checks["python"].detail
    with_logs = {c.name: c for c in judge(None, EXPECTED, JobEnd("failed", log_tail="module: command not found"),
                                          True)}
    assert with_logs["run_dir_visible"].ok and "module: command not found" in with_logs["python"].detail
    assert "setup:" in with_logs["python"].fix
    refused = {c.name: c for c in judge(None, EXPECTED, JobEnd("refused", "Invalid account"), False)}
    assert "Invalid account" in refused["python"].detail and "orch sites check" in refused["python"].fix


def test_the_modules_setup_lines_load() -> None:
    assert setup_modules(["module purge", "module load baskerville bask-apps/live", "module use /soft/modulefiles",
                          "ml cuda/12 --quiet", "ml purge", "source ~/venv/bin/activate  # not a module",
                          "module add gcc  # compilers"]) == ["baskerville", "bask-apps/live", "cuda/12", "gcc"]


def test_the_profile_hash_follows_the_file_and_names_the_system(tmp_path: Path) -> None:
    sites = tmp_path / "sites"
    text = (REPO / "sites" / "dgx.yaml").read_text()
    write(sites / "dgx.yaml", text)
    site, h100, a100 = (fingerprint(t, [sites]) for t in ("dgx", "dgx:h100", "dgx:a100_80"))
    assert len({site.sha256, h100.sha256, a100.sha256}) == 3 and h100.target == "dgx:h100"
    assert site.sha256 == fingerprint("dgx", [sites]).sha256  # stable
    write(sites / "dgx.yaml", text + "# a comment is an edit too\n")
    assert fingerprint("dgx:h100", [sites]).sha256 != h100.sha256


def test_the_migration_makes_the_models_table(tmp_path: Path) -> None:
    from sqlalchemy import inspect

    from orchestrator.results.db.engine import make_engine, upgrade
    from orchestrator.results.db.models import SiteProbe

    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    upgrade(engine)
    with engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("site_probes")}
    assert columns == {c.name for c in SiteProbe.__table__.columns}
    engine.dispose()
