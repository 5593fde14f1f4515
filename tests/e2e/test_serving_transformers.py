"""A third-party server in the suite (issue 49): D4's `tiny-transformers` variant through `orch run`
against Hugging Face's `transformers serve` with continuous batching, started by llm_serving from
the serving environment (.venv-serving, scripts/setup_serving.sh), on the CPU with a random-weight
tiny Llama written at start. Poisson arrivals at 8 requests/s against a server that takes well
over 1/8 s per request: requests are in flight together, which requests.jsonl shows.

The run is done once for the module (one experiment of the example: one server start, about a
minute on the 2-core machine). No skip: setup installs .venv-serving, and a server that does not
start here is a failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, run_orch, write
from workloads.serving import launch

ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The variant's run (its first experiment only: the others are the same run on other sites'
    names) and its rows of the serving view, joined to the run directory."""
    python = Path(launch.serving_python())
    assert python.exists(), f"{python} is missing: scripts/setup.sh (scripts/setup_serving.sh) makes it"
    workdir = tmp_path_factory.mktemp("transformers-serve")
    sweep = yaml.safe_load((REPO / "examples" / "D4-serving.yaml").read_text())
    sweep["experiments"] = sweep["experiments"][:1]
    path = write(workdir / "d4.yaml", yaml.safe_dump(sweep, sort_keys=False))
    run = run_orch("run", str(path), "--variant", "tiny-transformers", "--interval", "0.5", cwd=workdir, env=ENV,
                   timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    query = "SELECT s.*, r.run_dir FROM serving s JOIN runs r ON r.id = s.run_id"
    rows = json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=ENV, check=True).stdout)
    return workdir, rows


@pytest.mark.slow
def test_transformers_serve_answers_d4_tiny_with_requests_in_flight_together(
        served: tuple[Path, list[dict[str, Any]]]) -> None:
    _, rows = served
    (row,) = rows
    assert row["backend"] == "transformers" and row["arrival"] == "poisson" and row["request_rate"] == 8
    assert row["requests_completed"] == 12 and row["requests_failed"] == 0
    run_dir = Path(row["run_dir"])
    # The server the run started was Hugging Face's, with continuous batching.
    log = (run_dir / "server.log").read_text()
    assert "CB: True" in log, log[-2000:]
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 12 and all(r["ok"] for r in records)
    # Every request got exactly the tokens it asked for, one streamed chunk each.
    assert all(r["output_tokens"] == r["output_len"] == 8 == len(r["chunk_s"]) for r in records)
    assert row["itl_count"] == 12 * 7
    # Concurrent requests: some request was sent before an earlier-sent one had ended.
    intervals = sorted((r["sent_s"], r["sent_s"] + r["latency_s"]) for r in records)
    overlapping = [(a, b) for a, b in zip(intervals, intervals[1:]) if b[0] < a[1]]
    assert overlapping, intervals
    # ... and more than one was in flight at the time of a token: the batch holds several.
    most = max(sum(1 for s, e in intervals if s <= t < e) for t, _ in intervals)
    assert most >= 2, intervals


GUIDELLM = """\
name: guidellm
experiments:
  - name: guidellm
    workload: llm_serving
    sites: [local]
    walltime: "00:06:00"
    grid: {backend: transformers, loadgen: guidellm, model: tiny, arrival: poisson, rate: 8, num_requests: 6,
           input_len: 32, output_len: 8, warmup: 1, slo: mlperf-llama2-70b-server}
"""


@pytest.mark.slow
def test_guidellm_drives_transformers_serve_into_the_same_serving_rows(tmp_path: Path) -> None:
    """--loadgen guidellm: GuideLLM 0.8 from .venv-guidellm drives the same server; its per-request
    statistics are requests.jsonl's records and the serving row's figures, its name and version
    in the run's provenance."""
    run = run_orch("run", str(write(tmp_path / "g.yaml", GUIDELLM)), "--interval", "0.5", cwd=tmp_path, env=ENV,
                   timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    query = "SELECT s.*, r.run_dir FROM serving s JOIN runs r ON r.id = s.run_id"
    (row,) = json.loads(run_orch("sql", "-f", "json", query, cwd=tmp_path, env=ENV, check=True).stdout)
    run_dir = Path(row["run_dir"])
    provenance = json.loads((run_dir / "metrics.json").read_text())["serving"]["loadgen"]
    assert provenance["name"] == "guidellm" and provenance["version"].startswith("0.8")
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 6 == row["requests_completed"] and all(r["ok"] for r in records)
    # GuideLLM's prompts were cut to 32 tokens by the served model's tokenizer, 8 tokens came back.
    assert all(r["input_tokens"] == 32 and r["output_tokens"] == 8 for r in records)
    assert all(r["chunks"] == "first_last" and len(r["chunk_s"]) == 2 for r in records)
    ttft = sorted(r["chunk_s"][0] for r in records)
    assert row["ttft_p50_s"] == pytest.approx((ttft[2] + ttft[3]) / 2, rel=1e-9)
    # ITL: one per request, GuideLLM's mean gap.
    assert row["itl_count"] == 6
    gaps = sorted((r["chunk_s"][1] - r["chunk_s"][0]) / 7 for r in records)
    assert row["itl_p50_s"] == pytest.approx((gaps[2] + gaps[3]) / 2, rel=1e-9)
