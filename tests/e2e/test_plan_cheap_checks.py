"""What the profile and the environment decide is checked before any memory trace (issue 27:
the account, queue and walltime checks ran after seconds of tracing), and a site-wide reason
(account or QoS missing) is said once for the site, not once per run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_orch, write

GPT2 = "    workload: gpt2\n    grid: {model: [tiny, gpt2], devices: [4, 40], batch_size: 1, seq_len: 64}\n"


def _plan(tmp_path: Path, sweep: Path, env: dict[str, str], *extra: str) -> tuple[str, str]:
    full = {"ORCH_MEMORY_CACHE": str(tmp_path / "empty-cache"), **env}  # every shape would need a trace
    proc = run_orch("plan", str(sweep), "--dry-run", *extra, cwd=tmp_path, env=full, check=True)
    return proc.stdout, proc.stderr


def test_queue_and_walltime_refusals_come_before_any_memory_trace(tmp_path: Path) -> None:
    # Polaris: 168 h (capacity, 1-4 nodes) and 24 h (prod large) are the longest queues.
    sweep = write(tmp_path / "s.yaml", "name: long\nexperiments:\n  - name: g\n    sites: [polaris]\n"
                                       "    walltime: '200:00:00'\n" + GPT2)
    out, err = _plan(tmp_path, sweep, {"ORCH_ACCOUNT": "proj"}, "--json")
    runs = json.loads(out)["runs"]
    assert len(runs) == 4 and {r["status"] for r in runs} == {"skipped"}
    for run in runs:
        nodes = 1 if run["devices"] == 4 else 10
        assert run["reason"].startswith(f"walltime 200:00:00 exceeds the longest queue that fits {nodes} node(s)"), run
    assert "tracing" not in err and not (tmp_path / "empty-cache").exists()


def test_a_node_count_no_queue_takes_is_refused_before_tracing_with_walltime_auto(tmp_path: Path) -> None:
    sites = write(tmp_path / "sites" / "tiny-queues.yaml", (Path(__file__).parents[2] / "sites" / "polaris.yaml")
                  .read_text().replace("name: polaris", "name: tiny-queues", 1))
    text = sites.read_text()
    # Only debug (1-2 nodes) is chosen automatically: 10 nodes fit no queue, whatever the walltime.
    for name in ("debug-scaling", "prod", "capacity"):
        text = text.replace(f"  - name: {name}", f"  - name: {name}\n    auto: false")
    sites.write_text(text)
    sweep = write(tmp_path / "s.yaml", "name: auto\nexperiments:\n  - name: g\n    sites: [tiny-queues]\n"
                                       "    walltime: auto\n    workload: gpt2\n"
                                       "    grid: {model: [tiny, gpt2], devices: 40, batch_size: 1, seq_len: 64}\n")
    out, err = _plan(tmp_path, sweep, {"ORCH_ACCOUNT": "proj", "ORCH_SITES_PATH": str(sites.parent)}, "--json")
    runs = json.loads(out)["runs"]
    assert {r["status"] for r in runs} == {"skipped"}, runs
    assert all(r["reason"].startswith("no queue takes 10 node(s) / 40 device(s)") for r in runs), runs
    assert "tracing" not in err and not (tmp_path / "empty-cache").exists()


def test_a_missing_qos_is_said_once_for_the_site_before_tracing(tmp_path: Path) -> None:
    # Baskerville needs an account and a QoS; no queue of it brings its own QoS.
    sweep = write(tmp_path / "s.yaml", "name: qos\nexperiments:\n"
                                       "  - name: a\n    sites: [baskerville]\n    walltime: 600\n" + GPT2.replace(
                                           "devices: [4, 40]", "devices: [1, 4]") +
                                       "  - name: b\n    sites: [baskerville]\n    walltime: 900\n" + GPT2.replace(
                                           "devices: [4, 40]", "devices: [2, 8]"))
    out, err = _plan(tmp_path, sweep, {"ORCH_ACCOUNT": "proj"})
    reason = "site baskerville needs a QoS: set $ORCH_BASKERVILLE_QOS or $ORCH_QOS"
    assert out.count(reason) == 1 and f"{reason} (8 runs)" in out, out
    assert "tracing" not in err and not (tmp_path / "empty-cache").exists()
    out, _ = _plan(tmp_path, sweep, {})  # no account either: the account is said, once
    assert out.count("site baskerville needs an account/project") == 1 and "QoS" not in out, out
