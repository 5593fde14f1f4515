"""Every example sweep, rendered on every built-in site and system, runs something that can run.

Each study file in examples/ is planned (``orch plan --dry-run --show --json``, a real orch
process) with every experiment's ``sites`` replaced by all the built-in sites and systems. In
every rendered script, each program started as ``-m <module>`` / ``--module <module>`` must be:

- one of orch's workloads, whose command line parses with the workload's own argument parser
  (``workloads.harness.cli.parse_args`` with its registry entry), or
- a vendor runner's pieces: ``orchestrator.sites.vendors.capture`` (the vendor's own tool, output kept
  in a log), ``orchestrator.sites.vendors.params``, and the adapter of a registered vendor runner, whose
  command line parses with the adapter's parser and reads the log the capture step wrote;

and every script starts at least one of the two. A planned run that fails this is the bug of
issue 14 (a script that cannot work); runs a system cannot do are skipped with a reason.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from orchestrator.sites.placeholders import placeholder_env
from orchestrator.sites.vendors.base import runners
from scripts.pretrace import STUDY_FILES, every_site_targets, on_every_site
from tests.conftest import run_orch
from workloads import registry
from workloads.harness.cli import parse_args

# Every account and environment a built-in profile reads (the placeholders scripts/pretrace.py
# plans with), so that no run is skipped for want of one.
ENV = placeholder_env()
VENDOR_HELPERS = {"orchestrator.sites.vendors.capture", "orchestrator.sites.vendors.params"}


def adapters() -> dict[str, ModuleType]:
    import importlib

    return {cls.adapter: importlib.import_module(cls.adapter) for cls in runners().values()}


def modules_started(script: str) -> list[tuple[str, list[str]]]:
    """(module, its arguments) for every ``-m``/``--module`` program of the script's commands."""
    found = []
    for line in script.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for i, word in enumerate(words[:-1]):
            if word in ("-m", "--module") and words[i + 1].startswith(("workloads.", "orchestrator.")):
                found.append((words[i + 1], words[i + 2:]))
    return found


def check_script(script: str, adapter_modules: dict[str, ModuleType]) -> str | None:
    """Why the script's commands cannot work (None: every one parses / names an adapter)."""
    started = modules_started(script)
    if not any(m.startswith("workloads.") or m in adapter_modules for m, _ in started):
        return "starts neither an orch workload nor a vendor adapter"
    by_module = {w.module: w for w in registry.WORKLOADS.values()}
    logs: list[str] = []
    for module, args in started:
        if module.startswith("workloads."):
            if module not in by_module:
                return f"unknown workload module {module}"
            tail = args
            if "--" in args and module != args[-1]:
                tail = args[: args.index("--")]
            try:
                parse_args(by_module[module], tail)
            except SystemExit:
                return f"{module} rejects its command line: {shlex.join(tail)}"
        elif module == "orchestrator.sites.vendors.capture":
            logs.append(args[args.index("--log") + 1])
            if "--" not in args or not args[args.index("--") + 1:]:
                return "capture without a vendor command"
        elif module in VENDOR_HELPERS:
            continue
        elif module in adapter_modules:
            try:
                parsed = adapter_modules[module].build_parser().parse_args(args)
            except SystemExit:
                return f"{module} rejects its command line: {shlex.join(args)}"
            if parsed.source not in logs:
                return f"{module} reads {parsed.source}, which no capture step before it writes"
        else:
            return f"{module} is neither a workload nor a vendor runner's adapter"
    return None


def refusal(script: str, adapter_modules: dict[str, ModuleType]) -> str:
    """Why a script the test expects refused cannot work."""
    reason = check_script(script, adapter_modules)
    assert reason is not None, script
    return reason


# The memory of these plans' runs is predicted from the shapes shipped traced (scripts/pretrace.py
# plans the same sweeps), so a new machine traces nothing here.
@pytest.mark.parametrize("example", STUDY_FILES, ids=[p.stem.split("-")[0] for p in STUDY_FILES])
def test_every_planned_run_on_every_site_can_start(example: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = on_every_site(example)
    everywhere = every_site_targets()
    sweep = tmp_path / example.name
    sweep.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = run_orch("plan", str(sweep), "--dry-run", "--show", "--json", cwd=tmp_path, env=ENV, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout)
    runs = {r["run_id"]: r for r in plan["runs"]}
    planned = [r for r in runs.values() if r["status"] == "planned"]
    assert all(r["status"] == "planned" or r["reason"] for r in runs.values())
    assert {r["site"] for r in runs.values()} == set(everywhere)  # every target was tried
    found = adapters()
    bad = []
    for run in planned:
        reason = check_script(plan["scripts"][run["run_id"]], found)
        if reason:
            bad.append((run["site"], run["experiment"], run["precision"], reason))
    assert not bad, bad[:10]
    vendor_runs = [r for r in planned if any(m in found for m, _ in modules_started(plan["scripts"][r["run_id"]]))]
    with capsys.disabled():  # what ran through a vendor's tool, for the record
        print(f"\n{example.stem}: {len(planned)} planned of {len(runs)}, {len(vendor_runs)} through a vendor's tool")


def test_the_check_catches_what_issue_14_found() -> None:
    """The scripts the issue tried by hand fail the check: a compile subcommand, --device rdu, no adapter."""
    found = adapters()
    assert "rejects its command line" in refusal(
        "python -m workloads.gemm compile --pef-name=x --precision bf16 --device rdu --output m.json\n", found)
    assert "rejects its command line" in refusal(
        "srun python -m workloads.gemm --precision fp16 --device ipu --output m.json\n", found)
    assert check_script("python run.py CSX --params params.yaml --num_csx=1 --mode train\n", found) == \
        "starts neither an orch workload nor a vendor adapter"
    assert "which no capture step" in refusal(
        "python -m orchestrator.sites.vendors.groq --from other.log --output m.json --workload resnet50 "
        "--precision fp16\n", found)
    assert check_script("deepspeed --num_nodes=1 --num_gpus=8 --no_local_rank --module workloads.gemm "
                        "--precision bf16 --device hpu --output m.json\n", found) is None


def test_every_vendor_runner_has_an_adapter_with_a_sample() -> None:
    samples = {p.name.split("_")[0] for p in (Path(__file__).parent / "samples").glob("*.log")}
    for name, cls in runners().items():
        module = adapters()[cls.adapter]
        assert hasattr(module, "build_parser") and hasattr(module, "main"), name
        assert cls.adapter.rsplit(".", 1)[1] in samples, f"{name}: no output sample for its adapter"
