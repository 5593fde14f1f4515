"""The examples' shapes ship traced (issue 25 item 6): a new user's first plan of an example
traces nothing, and what ships is what a fresh trace gives.

``orchestrator/predict/pretraced.json`` is built by ``scripts/pretrace.py``. These tests fail when
the traced code changed and the table was not rebuilt (its keys no longer match: every shape
would be traced again, minutes on a cold cache), or when a rebuilt entry differs from a fresh
trace of the same shape.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.app import app
from orchestrator.predict import memory, pretraced
from orchestrator.predict.memory_inputs import Inputs
from orchestrator.sites.placeholders import placeholder_env
from scripts.pretrace import plans, stale
from tests.conftest import REPO, run_orch


def test_the_table_was_traced_from_this_checkouts_code() -> None:
    assert stale() is None, stale()
    assert len(pretraced.read()["entries"]) > 100  # every example's shapes, not a token few


def test_every_example_and_variant_plans_without_tracing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planned as a user holding every account would (so no run is refused before its memory is
    predicted), on an empty cache: not one shape traced, every gpt2 prediction a traced one. The
    study files moved onto every built-in site (scripts/pretrace.py's plans) too."""
    env = {k: v for k, v in os.environ.items() if k.startswith("ORCH_")}
    for name in env:
        monkeypatch.delenv(name)
    for name, value in {**placeholder_env(), "ORCH_HOME": str(tmp_path / "home"),
                        "ORCH_MEMORY_CACHE": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(memory, "_cache", {})  # nothing from other tests in this process
    traced: list[Inputs] = []
    runner = CliRunner()
    planned = 0
    with memory.on_trace(traced.append):
        for sweep, variant in plans(tmp_path):
            args = ["plan", "--dry-run", "--json", str(sweep)] + (["--variant", variant] if variant else [])
            result = runner.invoke(app, args, catch_exceptions=False)
            assert result.exit_code == 0, result.output
            for run in json.loads(result.stdout)["runs"]:
                if run["workload"] == "gpt2" and run["mem_gb"] is not None:
                    planned += 1
                    assert run["mem_from"] != "formula" or "pp=" in run["params"] or "tp=" in run["params"], run
    assert not traced, f"{len(traced)} shapes traced, e.g. {memory.describe(traced[0])}: run scripts/pretrace.py"
    assert not list((tmp_path / "cache").glob("*.json"))  # nothing was stored: nothing was missing
    assert planned > 500


def test_shipped_entries_are_what_a_fresh_trace_gives(tmp_path: Path) -> None:
    """B4's tiny variant planned with the table switched off, on an empty cache: every shape it
    traces (DDP, FSDP full and grad-op, DeepSpeed ZeRO 1-3 and its forward/backward) is in the
    table with the same bytes."""
    cache = tmp_path / "cache"
    env = {**placeholder_env(), "ORCH_MEMORY_CACHE": str(cache), pretraced.ENV: "0"}
    run_orch("plan", "--dry-run", "--json", str(REPO / "examples" / "B4-strategies.yaml"), "--variant", "tiny",
             cwd=tmp_path, env=env, check=True)
    fresh = {p.stem: json.loads(p.read_text()) for p in cache.glob("*.json")}
    shipped = pretraced.read()["entries"]
    strategies = {e["inputs"].split("strategy='")[1].split("'")[0] for e in fresh.values()}
    assert strategies >= {"ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3"}, strategies
    differ = [f"{e['inputs']}: fresh {e['bytes']}, shipped {shipped.get(k, {}).get('bytes')}"
              for k, e in fresh.items() if shipped.get(k, {}).get("bytes") != e["bytes"]]
    assert not differ, "\n".join(differ[:10])


def test_a_damaged_or_missing_table_serves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table that cannot be read is no table: those shapes are traced, nothing is made up."""
    assert pretraced.read(tmp_path / "absent.json")["entries"] == {}
    bad = tmp_path / "bad.json"
    bad.write_text('{"code": "x", "entries": {"k": {"bytes": "many"}')
    assert pretraced.read(bad)["entries"] == {}
    key = next(iter(pretraced.read()["entries"]))
    monkeypatch.setattr(pretraced, "_entries", None)
    assert pretraced.lookup(key) is not None
    monkeypatch.setenv(pretraced.ENV, "0")
    assert pretraced.lookup(key) is None
