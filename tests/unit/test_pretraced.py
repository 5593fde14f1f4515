"""The examples' shapes ship traced (issue 25 item 6): a new user's first plan of an example
traces nothing, and what ships is what a fresh trace gives.

``orchestrator/predict/pretraced.json`` is built by ``scripts/pretrace.py``, keyed by the traced
shape (orchestrator/predict/pretraced.py). These tests fail when an example or variant plans a
shape the table lacks (run scripts/pretrace.py: it adds the missing ones), or when a fresh trace of
a covering sample of the entries (one per strategy family) differs from what ships (the traced code
changed what it traces: scripts/pretrace.py --full). An edit that changes nothing traced leaves
the table valid (issue 46).
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
from workloads.models.configs import GPTConfig


def test_the_table_serves_this_install() -> None:
    assert stale() is None, stale()
    assert len(pretraced.read()["entries"]) > 100  # every example's shapes, not a token few


def shape(text: str) -> Inputs:
    inputs = eval(text, {"Inputs": Inputs, "GPTConfig": GPTConfig})  # the table's own repr() of the shape
    assert repr(inputs) == text
    return inputs


def test_an_edit_that_changes_nothing_traced_leaves_the_table_valid(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 46: the table was keyed by a hash of the workload code, so a comment added to lm.py made
    every shipped shape miss (traced again). An edit changes the code's hash (the disk cache's keys):
    the shipped shapes still serve, and nothing is traced."""
    monkeypatch.setenv("ORCH_MEMORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(memory, "_cache", {})
    monkeypatch.setattr(memory, "_code_version", "an-edited-lm-py")
    entries = pretraced.read()["entries"]
    traced: list[Inputs] = []
    with memory.on_trace(traced.append):
        for text in list(entries)[:50]:
            assert memory.cached_trace(shape(text), memory.compute) == entries[text]
    assert not traced, memory.describe(traced[0])


def family(inputs: Inputs) -> tuple[object, ...]:
    return (inputs.strategy, inputs.accum > 1, inputs.cp > 1, inputs.tp > 1, inputs.cfg.checkpointing)


@pytest.mark.slow  # a minute or two of tracing: the full suite's, not ./scripts/test.sh --fast
def test_a_covering_sample_of_the_entries_is_what_a_fresh_trace_gives(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The smallest entry of each strategy family (DDP, FSDP full and grad-op, DeepSpeed ZeRO 1-3 and
    its forward/backward; with and without accumulation, context and tensor parallel, checkpointing),
    traced afresh with the table switched off on an empty cache: the same bytes. An edit that changes
    what a family traces fails here until the table is rebuilt (scripts/pretrace.py --full)."""
    monkeypatch.setenv("ORCH_MEMORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(pretraced.ENV, "0")
    monkeypatch.setattr(memory, "_cache", {})
    smallest: dict[tuple[object, ...], tuple[int, str]] = {}
    for text, found in pretraced.read()["entries"].items():
        key = family(shape(text))
        smallest[key] = min(smallest.get(key, (found, text)), (found, text))
    assert {k[0] for k in smallest} >= {"ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3",
                                        "forward-backward"}
    differ = [f"{text}: fresh {fresh}, shipped {found}" for found, text in smallest.values()
              if (fresh := memory.cached_trace(shape(text), memory.compute)) != found]
    assert not differ, "\n".join(differ)


@pytest.mark.slow  # every example planned: the full suite's, not ./scripts/test.sh --fast
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


def test_a_damaged_or_missing_table_serves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table that cannot be read is no table: those shapes are traced, nothing is made up."""
    assert pretraced.read(tmp_path / "absent.json")["entries"] == {}
    bad = tmp_path / "bad.json"
    bad.write_text('{"torch": "x", "entries": {"k": "many"')
    assert pretraced.read(bad)["entries"] == {}
    key = next(iter(pretraced.read()["entries"]))
    monkeypatch.setattr(pretraced, "_entries", None)
    assert pretraced.lookup(key, memory.table_stamp()) is not None
    monkeypatch.setattr(pretraced, "_entries", None)  # a table of another torch serves nothing
    assert pretraced.lookup(key, ("1.0", memory.CACHE_VERSION)) is None
    monkeypatch.setattr(pretraced, "_entries", None)
    monkeypatch.setenv(pretraced.ENV, "0")
    assert pretraced.lookup(key, memory.table_stamp()) is None
