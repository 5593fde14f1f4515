"""The inference view on real runs: MBU from the site's peak bandwidth and the cost of 1M tokens
from its price, as a hand computation gives them; and D3's tiny variant through `orch run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, run_orch, write
from tests.tiny_runs import shared_root, tiny_run

SWEEP = """\
name: infer
experiments:
  - name: curve
    workload: llm_inference
    sites: [priced]
    walltime: "00:05:00"
    grid: {model: tiny, devices: [1, 2], concurrency: [1, 4], input_len: 32, output_len: 6, warmup: 1, iters: 2}
"""


@pytest.mark.slow
def test_inference_view_by_hand(workdir: Path) -> None:
    profile = yaml.safe_load((REPO / "sites" / "local.yaml").read_text())
    profile.update(name="priced")
    profile["device"]["bandwidth_gbs"] = 20.0
    profile["price"] = {"per_device_hour": 0.5, "currency": "USD", "basis": "local-estimate",
                        "source": "a test's price", "date": "2026-11"}
    sites = workdir / "sites"
    write(sites / "priced.yaml", yaml.safe_dump(profile))
    run_orch("--sites-dir", str(sites), "run", str(write(workdir / "infer.yaml", SWEEP)), cwd=workdir, check=True,
             timeout=900)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT * FROM inference ORDER BY devices, concurrency",
                               cwd=workdir, check=True).stdout)
    assert [(r["devices"], r["concurrency"]) for r in rows] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    # The profile's bandwidth reaches the program too, so its own metrics file carries MBU.
    scripts = sorted(workdir.glob(".orch/**/job.sh"))
    assert len(scripts) == 4 and all("--peak-bandwidth-gbs 20.0 " in s.read_text() for s in scripts)
    files = [json.loads(p.read_text()) for p in workdir.glob(".orch/**/metrics.json")]
    assert len(files) == 4 and all(f["metrics"]["mbu"] is not None for f in files)
    for r in rows:
        assert r["model"] == "tiny" and r["input_len"] == 32 and r["output_len"] == 6
        assert r["peak_bandwidth_gbs"] == 20.0
        assert r["mbu"] == pytest.approx(r["decode_bandwidth_gbs"] / (r["devices"] * 20.0), rel=1e-9)
        assert r["cost_per_1m_tokens"] == pytest.approx(0.5 * r["devices"] * 1e6 / (r["output_tokens_per_s"] * 3600),
                                                        rel=1e-9)
        assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"] and r["tpot_s"] > 0


@pytest.mark.slow
def test_d3_tiny_variant_runs(tmp_path_factory: pytest.TempPathFactory) -> None:
    tiny = tiny_run(shared_root(tmp_path_factory), "D3-inference.yaml")  # once a session, shared with test_examples
    assert tiny.returncode == 0, tiny.stdout[-3000:] + tiny.stderr[-3000:]
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT concurrency, output_tokens_per_s FROM inference",
                               cwd=tiny.workdir, check=True).stdout)
    assert sorted({r["concurrency"] for r in rows}) == [1, 4, 16]
    assert all(r["output_tokens_per_s"] > 0 for r in rows)
