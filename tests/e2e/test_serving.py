"""Serving through the whole flow (issue 28): D4's tiny variant planned, run on `local` against
orch's real CPU server, collected, and read back from the `serving` view: per offered rate the
TTFT/ITL/TPOT/e2e percentiles with their sample counts and goodput, equal to a hand computation
from the run directory's requests.jsonl; and a server that cannot listen recorded on the attempt
as `port_in_use`, not as a plain `failed`."""

from __future__ import annotations

import json
import socket
import statistics
from pathlib import Path

import pytest

from tests.conftest import REPO, run_orch, write
from tests.e2e.test_report import figure_sections
from tests.tiny_runs import shared_root, tiny_run

ENV = {"OMP_NUM_THREADS": "1"}


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@pytest.mark.slow
def test_d4_tiny_variant_stores_serving_figures_per_rate(workdir: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    tiny = tiny_run(shared_root(tmp_path_factory), "D4-serving.yaml")  # once a session, shared with test_examples
    assert tiny.returncode == 0, tiny.stdout[-3000:] + tiny.stderr[-3000:]
    query = ("SELECT s.*, r.run_dir FROM serving s JOIN runs r ON r.id = s.run_id "
             "ORDER BY s.experiment, s.request_rate")
    rows = json.loads(run_orch("sql", "-f", "json", query, cwd=tiny.workdir, env=ENV, check=True).stdout)
    assert sorted({r["request_rate"] for r in rows}) == [2, 8] and len(rows) == 4
    for row in rows:
        assert row["backend"] == "builtin" and row["arrival"] == "poisson" and row["model"] == "tiny"
        assert row["ttft_count"] == row["e2e_count"] == row["tpot_count"] == 12 == row["requests_completed"]
        assert row["itl_count"] == 12 * 7 and row["requests_failed"] == 0
        for name in ("ttft", "itl", "tpot", "e2e"):
            assert 0 < row[f"{name}_p50_s"] <= row[f"{name}_p90_s"] <= row[f"{name}_p99_s"]
        assert (row["slo_ttft_s"], row["slo_tpot_s"]) == (2.0, 0.2)
        assert row["goodput_requests_per_s"] is not None and 0 <= row["goodput_fraction"] <= 1
        assert row["slo_met"] in (0, 1) and row["output_tokens_per_s"] > 0
        # The stored figures are those of the raw records kept in the run directory.
        records = [json.loads(line) for line in (Path(row["run_dir"]) / "requests.jsonl").read_text().splitlines()]
        assert len(records) == 12 and all(r["ok"] for r in records)
        ttft = [r["chunk_s"][0] for r in records]
        tpot = [(r["latency_s"] - r["chunk_s"][0]) / (r["output_tokens"] - 1) for r in records]
        assert row["ttft_p99_s"] == pytest.approx(_pct(ttft, 99), rel=1e-9)
        assert row["tpot_p50_s"] == pytest.approx(_pct(tpot, 50), rel=1e-9)
        within = sum(1 for a, b in zip(ttft, tpot) if a <= 2.0 and b <= 0.2)
        assert row["goodput_fraction"] == pytest.approx(within / 12)
        assert row["goodput_requests_per_s"] == pytest.approx(row["requests_per_s"] * within / 12, rel=1e-9)
    # The report draws the curve with the SLO lines, a mark per run.
    run_orch("report", "-o", str(workdir / "report.html"), cwd=tiny.workdir, env=ENV, check=True)
    sections = figure_sections((workdir / "report.html").read_text())
    assert "serving" in sections, sorted(sections)
    figure = sections["serving"]
    assert "SLO TTFT 2 s" in figure and "SLO TPOT 0.2 s" in figure
    assert all(row["run_id"] in figure for row in rows)


SWEEP = """\
name: taken
experiments:
  - name: port
    workload: llm_serving
    sites: [local]
    walltime: "00:02:00"
    grid: {{model: tiny, rate: 5, num_requests: 2, input_len: 8, output_len: 3, warmup: 0, port: {port}}}
"""


@pytest.mark.slow
def test_taken_port_is_its_own_failure_class(workdir: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run_orch("run", str(write(workdir / "taken.yaml", SWEEP.format(port=port))), "--interval", "0.5",
                 cwd=workdir, env=ENV, timeout=300)
    (row,) = json.loads(run_orch("sql", "-f", "json", "SELECT state, failure_class, reason FROM attempts",
                                 cwd=workdir, env=ENV, check=True).stdout)
    assert row["state"] == "failed" and row["failure_class"] == "port_in_use", row
    assert str(port) in row["reason"]


PRICED = """\
name: priced-serving
experiments:
  - name: curve
    workload: llm_serving
    sites: [priced, euro, unpriced]
    walltime: "00:03:00"
    grid: {model: tiny, arrival: concurrency, concurrency: 2, num_requests: 4, input_len: 8, output_len: 4,
           warmup: 0, slo: mlperf-llama2-70b-interactive}
"""


@pytest.mark.slow
def test_cost_of_1m_tokens_from_the_sites_price(workdir: Path) -> None:
    """usd_per_million_output_tokens (migration 0015) on a local run with a price set, charged as the
    cost view charges; NULL, with the reason, where the price is not in USD or there is none."""
    import yaml

    base = yaml.safe_load((REPO / "sites" / "local.yaml").read_text())
    price = {"per_device_hour": 0.5, "currency": "USD", "basis": "local-estimate", "source": "a test's price",
             "date": "2026-11"}
    for name, site_price in (("priced", price), ("euro", {**price, "currency": "EUR"}), ("unpriced", None)):
        write(workdir / "sites" / f"{name}.yaml", yaml.safe_dump({**base, "name": name, "price": site_price}))
    run_orch("--sites-dir", str(workdir / "sites"), "run", str(write(workdir / "p.yaml", PRICED)), "--interval", "0.5",
             cwd=workdir, env=ENV, check=True, timeout=300)
    rows = {r["site"]: r for r in json.loads(run_orch("sql", "-f", "json", "SELECT * FROM serving", cwd=workdir,
                                                      env=ENV, check=True).stdout)}
    assert sorted(rows) == ["euro", "priced", "unpriced"]
    row = rows["priced"]
    assert row["arrival"] == "concurrency" and row["concurrency"] == 2 and row["request_rate"] is None
    assert (row["slo_ttft_s"], row["slo_tpot_s"]) == (0.45, 0.04)
    query = f"SELECT charged_devices FROM cost WHERE run_id = '{row['run_id']}'"
    (cost,) = json.loads(run_orch("sql", "-f", "json", query, cwd=workdir, env=ENV, check=True).stdout)
    assert row["charged_devices"] == cost["charged_devices"] == 1  # local: one process on one core
    per_hour = 0.5 * row["charged_devices"]
    assert row["cost_per_hour"] == pytest.approx(per_hour)
    expected = per_hour * 1e6 / (row["output_tokens_per_s"] * 3600)
    assert row["usd_per_million_output_tokens"] == pytest.approx(expected, rel=1e-9)
    assert row["cost_per_1m_tokens"] == pytest.approx(expected, rel=1e-9)
    both = per_hour * 1e6 / ((row["input_tokens_per_s"] + row["output_tokens_per_s"]) * 3600)
    assert row["usd_per_million_tokens"] == pytest.approx(both, rel=1e-9)
    assert row["input_tokens_per_s"] == pytest.approx(row["output_tokens_per_s"] * 8 / 4, rel=1e-9)
    assert row["price_note"] is None
    euro = rows["euro"]
    assert euro["cost_per_1m_tokens"] is not None and euro["price_currency"] == "EUR"
    assert euro["usd_per_million_output_tokens"] is None and euro["usd_per_million_tokens"] is None
    assert "EUR" in euro["price_note"]
    none = rows["unpriced"]
    assert none["cost_per_1m_tokens"] is None and none["usd_per_million_output_tokens"] is None
    assert "no price" in none["price_note"] and none["ttft_count"] == 4
