"""Issue 53, part B: tracebacks, hangs and memory under hostile input, and what real use found
(the cost of a shared node, runs that cannot start, the report's ranking, messages)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_orch, write

ACCOUNT = {"ORCH_ACCOUNT": "proj", "ORCH_QOS": "q"}


def test_a_run_on_a_share_of_a_node_is_charged_its_own_devices(workdir: Path) -> None:
    # Issue 53 real use 6: Baskerville's scripts ask `--gpus-per-node=1 --cpus-per-gpu=36`, not the
    # whole node, yet the 1-GPU run was charged 4 GPUs.
    sweep = write(workdir / "c.yaml", "name: c\nexperiments:\n  - name: one\n    workload: gemm\n"
                                      "    sites: [baskerville, stanage]\n    grid: {devices: [1, 2], m: 256}\n")
    out = json.loads(run_orch("plan", str(sweep), "--show", "--json", cwd=workdir, env=ACCOUNT,
                              check=True).stdout)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT id AS run_id, site, devices, charged_devices FROM runs",
                               cwd=workdir, check=True).stdout)
    seen = set()
    for row in rows:
        script = out["scripts"][row["run_id"]]
        exclusive = "#SBATCH --exclusive\n" in script
        site = row["site"].partition(":")[0]
        expected = {"baskerville": 4, "stanage": 2}[site] if exclusive else row["devices"]
        assert row["charged_devices"] == expected, (row, script)
        seen.add((site, row["devices"], exclusive))
    # Baskerville's partial-node run shares its node; stanage's holds it whole.
    assert {("baskerville", 1, False), ("stanage", 1, True)} <= seen


# Issue 53: values ingest accepted broke PostgreSQL's views (SQLite was fine): `tflops: 1e100`
# overflowed repeat_spread's variance; in llm_inference files a NUL character, `timed_steps` of
# 2^31 or `concurrency` of 1e20 broke the inference view. Each hostile file is either refused at
# ingest with a reason, or stored and then every view reads it, on both backends.
def _inference(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": "orch.metrics/1", "workload": "llm_inference", "precision": "bf16", "world_size": 1,
        "params": {"model": "tiny"}, "device": {"type": "cpu", "model": "host-cpu", "count": 1},
        "metrics": {"concurrency": 4, "input_len": 128, "output_len": 64, "ttft_p50_s": 0.1,
                    "output_tokens_per_s": 100.0, "tflops": 1.0},
        "timing": {"warmup_steps": 1, "timed_steps": 5}}
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = doc
        for key in parents:
            node = node[key]
        node[leaf] = value
    return doc


HOSTILE_FOR_VIEWS = {
    "tflops 1e100": _inference(metrics__tflops=1e100),
    "gemm tflops 1e100": _inference(workload="gemm", metrics={"tflops": 1e100}),
    "gemm tflops 1e-200": _inference(workload="gemm", metrics={"tflops": 1e-200}),
    "gemm tflops 1e60, 1e-60 s": _inference(workload="gemm", metrics={"tflops": 1e60, "step_time_s": 1e-60}),
    "tokens/s 1e100": _inference(metrics__output_tokens_per_s=1e100),
    "NUL in a param": _inference(params__model="ti\u0000ny"),
    "NUL in env": _inference(env={"note": "a\u0000b"}),
    "timed_steps 2^31": _inference(timing__timed_steps=2**31),
    "timed_steps 2^63-1": _inference(timing__timed_steps=2**63 - 1),
    "concurrency 1e20": _inference(metrics__concurrency=1e20),
    "output_len 3e9": _inference(metrics__output_len=3e9),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FOR_VIEWS))
def test_what_ingest_accepts_every_view_can_compute(db_url: str, name: str) -> None:
    from sqlalchemy import text

    from orchestrator.results.db.engine import open_database
    from orchestrator.results.db.models import Attempt, Run, SweepRecord
    from orchestrator.results.db.results import record_results
    from orchestrator.results.db.views import VIEW_NAMES
    from orchestrator.results.ingest import parse_metrics, storage_problem, store_metrics_many

    # Two repeats of different figures (the second's are halved): PostgreSQL's AVG keeps a sum of
    # squared deviations, which overflows where the values differ.
    doc = HOSTILE_FOR_VIEWS[name]
    other = {**doc, "metrics": {key: value / 2 for key, value in doc["metrics"].items()}}
    parsed = [parse_metrics(json.dumps(one)) for one in (doc, other)]
    for metrics, outcome, _ in parsed:
        if metrics is None or storage_problem(metrics) is not None:  # refused, with a reason
            assert metrics is not None or outcome.reason
            return
    sessions = open_database(db_url)
    with sessions.begin() as session:
        sweep = SweepRecord(name="s", path="/s.yaml", content_hash="h", content="name: s")
        session.add(sweep)
        session.flush()
        for repeat in (0, 1):  # two repeats: repeat_spread squares and sums them
            session.add(Run(id=f"r{repeat}", sweep_id=sweep.id, sweep="s", experiment="e", workload=doc["workload"],
                            site="local", status="finished", devices=1, precision="bf16", repeat=repeat,
                            params='{"model": "tiny"}', spec="{}", walltime_s=60,
                            max_attempts=1, retry_on="[]", peak_tflops=10.0, peak_bandwidth_gbs=100.0,
                            price_per_device_hour=1.0, charged_devices=1))
        session.flush()
        attempts = [Attempt(run_id=f"r{repeat}", number=1, state="completed", scheduler="local",
                            job_name=f"j{repeat}") for repeat in (0, 1)]
        session.add_all(attempts)
        session.flush()
        store_metrics_many(session, [(a.id, p[0]) for a, p in zip(attempts, parsed) if p[0]],
                           raws=[p[2] for p in parsed])
        record_results(session, [a.id for a in attempts])
    with sessions() as session:
        for view in VIEW_NAMES:
            session.execute(text(f"SELECT * FROM {view}")).all()


# Issue 53: a tampered `orch sites probe` report (a wrong type, deep nesting; on PostgreSQL a long
# or NUL string) made every `--collect` end in a traceback, and later probes were never judged.
GOOD_REPORT: dict[str, Any] = {
    "python": {"executable": "/usr/bin/python3", "version": "3.11.7"},
    "torch": "2.3.0", "torch_error": None, "deepspeed": None, "deepspeed_error": "No module named 'deepspeed'",
    "devices": {"type": "cpu", "count": 1, "names": ["cpu"], "error": None},
    "allreduce": {"ok": True, "backend": "gloo", "ranks": 1, "busbw_gbs": 1.5, "error": None},
    "run_dir": {"path": "x", "token": "TOKEN", "error": None},
    "modules": [], "nodes": ["n1"], "ranks": [{"hostname": "n1"}],
}
TAMPERED_REPORTS: dict[str, Any] = {
    "python a list": {**GOOD_REPORT, "python": ["3.11"]},
    "devices a string": {**GOOD_REPORT, "devices": "4 x cuda"},
    "count a string": {**GOOD_REPORT, "devices": {**GOOD_REPORT["devices"], "count": "many"}},
    "busbw a string": {**GOOD_REPORT, "allreduce": {**GOOD_REPORT["allreduce"], "busbw_gbs": "fast"}},
    "allreduce a list": {**GOOD_REPORT, "allreduce": [1, 2]},
    "ranks of numbers": {**GOOD_REPORT, "ranks": [1, 2]},
    "modules a number": {**GOOD_REPORT, "modules": 7},
    "torch a long string": {**GOOD_REPORT, "torch": "2." * 5000},
    "backend a long string": {**GOOD_REPORT, "allreduce": {**GOOD_REPORT["allreduce"], "backend": "g" * 500}},
    "NUL in torch": {**GOOD_REPORT, "torch": "2.3\u0000"},
    "NUL in a hostname": {**GOOD_REPORT, "ranks": [{"hostname": "n\u00001"}]},
    "deep nesting": "DEEP",
}


@pytest.mark.parametrize("name", sorted(TAMPERED_REPORTS))
def test_a_tampered_probe_report_is_refused_and_the_next_probe_judged(db_url: str, tmp_path: Path,
                                                                       name: str) -> None:
    from sqlalchemy import select

    from orchestrator.results.db.engine import open_database
    from orchestrator.results.db.models import SiteProbe
    from orchestrator.run.executors.base import JobInfo, JobState
    from orchestrator.run.probe import finish_probe

    sessions = open_database(db_url)
    reports = {"bad": TAMPERED_REPORTS[name], "good": GOOD_REPORT}
    ids = {}
    for which, report in reports.items():
        run_dir = tmp_path / which
        run_dir.mkdir()
        probe = {"probe": report}
        text = json.dumps(probe) if report != "DEEP" else '{"probe": ' + "[" * 5000 + "]" * 5000 + "}"
        (run_dir / "metrics.json").write_text(text)
        (run_dir / "stdout.log").write_text("")
        (run_dir / "probe.json").write_text(json.dumps(
            {"nodes": 1, "ranks": 1, "device_type": "cpu", "python": "/usr/bin/python3", "backend": "gloo",
             "run_dir": str(run_dir)}))
        with sessions.begin() as session:
            row = SiteProbe(site="local", profile_hash="h", profile_path="/p.yaml", state="submitted",
                            scheduler="local", job_id=which, run_dir=str(run_dir), token="TOKEN",
                            nodes_requested=1, ranks_requested=1)
            session.add(row)
            session.flush()
            ids[which] = row.id
    for which in ("bad", "good"):
        with sessions() as session:
            row = session.scalars(select(SiteProbe).where(SiteProbe.id == ids[which])).one()
        finish_probe(sessions, row, JobInfo(job_id=which, state=JobState.COMPLETED, exit_code=0))
    with sessions() as session:
        bad, good = (session.scalars(select(SiteProbe).where(SiteProbe.id == ids[w])).one() for w in ("bad", "good"))
    assert good.passed is True, good.checks
    assert bad.passed is False and bad.state == "finished"
    assert "report" in (bad.checks or "") and "refused" in (bad.checks or ""), bad.checks


# Issue 53: `orch report` crashed on matplotlib math text (`$...$`), reachable from a sweep's tag,
# which becomes a legend label, a category and a title. What a user wrote is drawn as written.
@pytest.mark.parametrize("text", ["$\\frac{$", "a $x^$ b", "$\\nocommand{1}$", "cost $5 and $6", "50%_$a_b$"])
def test_user_text_is_never_read_as_math(text: str) -> None:
    from orchestrator.results.report.draw import png_bytes, render, svg_text
    from orchestrator.results.report.model import FigureData, Panel, Point, Series, Table

    bars = Panel(title=text, xlabel=text, ylabel=text, kind="bars", categories=[text],
                 series=[Series(label=text, points=[Point(x=text, y=1.0, run_id="r")])])
    lines = Panel(title=text, xlabel=text, ylabel=text, kind="lines",
                  series=[Series(label=text + " 2", points=[Point(x=1.0, y=2.0, run_id="r")])])
    figure = render(FigureData(key="k", title=text, caption=text, panels=[bars, lines],
                               table=Table(columns=[], rows=[])))
    assert png_bytes(figure, dpi=30)
    assert text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in svg_text(figure)


# Issue 53: `orch sql --max-rows 2^63` ended in an OverflowError, and `orch sql` bounded rows but
# neither bytes nor time: a runaway query ran for ever.
ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def test_sql_max_rows_past_a_c_int_is_a_clear_error(workdir: Path) -> None:
    run_orch("db", "upgrade", cwd=workdir, check=True)
    proc = run_orch("sql", "--max-rows", str(2**63), "SELECT 1", cwd=workdir)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--max-rows: expected 0 (no limit) or a count up to" in proc.stderr


def test_a_runaway_query_is_stopped_at_its_time_limit(db_url: str, workdir: Path) -> None:
    env = {"ORCH_DB_URL": db_url}
    run_orch("db", "upgrade", cwd=workdir, env=env, check=True)
    proc = run_orch("sql", "--timeout", "1", ENDLESS, cwd=workdir, env=env, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "the query ran past 1 s and was stopped" in proc.stderr
    # The bound is the query's own: the next one on the same database runs.
    assert run_orch("sql", "-f", "json", "SELECT 1 AS one", cwd=workdir, env=env, check=True).stdout.strip()


def test_the_rows_read_are_bounded_in_bytes(tmp_path: Path) -> None:
    import sqlalchemy as sa

    from orchestrator.results.sql_bounds import fetch_bounded

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'b.db'}")
    with engine.connect() as conn:
        result = conn.execute(sa.text("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) "
                                      "SELECT x, printf('%.1000c', 'a') AS big FROM c"))
        rows, note = fetch_bounded(result, max_rows=0, max_bytes=100_000)
    assert 90 <= len(rows) < 100 and "the next would take the output past" in note, (len(rows), note)


# Issue 53: `orch predict --tokens 1e400` and `orch sites rehearsal -o <an existing file>` ended
# in tracebacks.
@pytest.mark.parametrize(("args", "expected"), [
    (["predict", "--tokens", "1e400", "--devices", "8", "--site", "baskerville", "--model", "gpt2"],
     "--tokens '1e400': expected a token count"),
    (["sites", "rehearsal", "baskerville", "-o", "afile"], "--output afile: a file, not a folder"),
    (["sites", "rehearsal", "baskerville", "-o", "afile/sub"], "--output afile/sub: cannot make the folder"),
])
def test_cli_values_past_their_range_are_clear_errors(workdir: Path, args: list[str], expected: str) -> None:
    write(workdir / "afile", "not a folder\n")
    proc = run_orch(*args, cwd=workdir)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert expected in proc.stderr


# Issue 53: one poll of 24 metrics files of 11 MB each took 3.9 GB: what one poll reads is
# bounded in bytes, the rest waits for the next poll (and one file is always read).
def test_one_poll_reads_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    from orchestrator.results.ingest import POLL_READ_BYTES, within_read_budget

    files = []
    for index in range(24):
        path = tmp_path / f"{index}.json"
        with open(path, "wb") as out:  # sparse: 11 MB each as stat says, nothing written
            out.truncate(11 * 1024 * 1024)
        files.append((index, path))
    files.append((99, tmp_path / "missing.json"))
    taken, later = within_read_budget(files)
    assert taken == files[:len(taken)] and later == files[len(taken):]
    assert sum(p.stat().st_size for _, p in taken) <= POLL_READ_BYTES < sum(p.stat().st_size for _, p in files[:-1])
    assert len(taken) == POLL_READ_BYTES // (11 * 1024 * 1024)
    taken, later = within_read_budget(files[:1], budget=1)  # a file past the budget alone is still read
    assert taken == files[:1] and later == []


# Issue 53 real use 3: Baskerville's profile loads PyTorch 2.1.2, which has no
# torch.distributed.fsdp.fully_shard (public from 2.6); every fsdp-full run was planned anyway.
FSDP_SWEEP = """\
name: f
experiments:
  - name: one
    workload: gpt2
    sites: [baskerville]
    grid: {{devices: 2, model: tiny, strategy: [ddp, fsdp-full, fsdp-grad-op]}}
{overrides}"""


def test_a_strategy_the_declared_torch_lacks_is_skipped_with_the_reason(workdir: Path) -> None:
    sweep = write(workdir / "f.yaml", FSDP_SWEEP.format(overrides=""))
    out = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, env=ACCOUNT, check=True).stdout)
    by_strategy = {r["params"].split("strategy=")[1].split()[0]: r for r in out["runs"]}
    assert by_strategy["ddp"]["status"] == "planned"
    for strategy in ("fsdp-full", "fsdp-grad-op"):
        row = by_strategy[strategy]
        assert row["status"] == "skipped", row
        assert f"strategy {strategy} needs torch >= 2.6" in row["reason"] and "torch 2.1.2" in row["reason"]
    # Another environment, given by the sweep: the profile's torch no longer speaks for it.
    venv = "    site_overrides: {baskerville: {python_env: {kind: venv, prefix: /opt/venv}}}\n"
    sweep = write(workdir / "g.yaml", FSDP_SWEEP.format(overrides=venv).replace("name: f", "name: g"))
    out = json.loads(run_orch("plan", str(sweep), "--json", cwd=workdir, env=ACCOUNT, check=True).stdout)
    assert {r["params"].split("strategy=")[1].split()[0]: r["status"] for r in out["runs"]}["fsdp-full"] == "planned"


# Issue 53: `:100:` in an error message was printed as an emoji by Rich, and raw escape
# sequences reached CSV output.
def test_an_error_message_is_printed_as_written_without_emoji(workdir: Path) -> None:
    proc = run_orch("plan", ":100: :smile:.yaml", cwd=workdir)
    assert proc.returncode != 0 and ":100: :smile:.yaml" in proc.stderr, proc.stderr
    assert "\U0001f4af" not in proc.stderr + proc.stdout


def test_csv_output_escapes_terminal_sequences(workdir: Path) -> None:
    run_orch("db", "upgrade", cwd=workdir, check=True)
    out = run_orch("sql", "-f", "csv", "SELECT char(27) || '[2J' || char(7) AS x, 'a\nb' AS y", cwd=workdir,
                   check=True).stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x07" in out and '"a\nb"' in out  # a newline stays a quoted CSV newline


def test_export_serves_the_serving_view(workdir: Path) -> None:
    # Issue 53 message 14: `orch export --view serving` was refused though serving is a view.
    run_orch("db", "upgrade", cwd=workdir, check=True)
    out = run_orch("export", "--view", "serving", "-f", "csv", cwd=workdir, check=True).stdout
    assert out.splitlines()[0].startswith("run_id,") and "goodput_requests_per_s" in out.splitlines()[0]


def test_a_site_overrides_target_that_matches_no_site_is_an_error(workdir: Path) -> None:
    # Issue 53: a misspelt site_overrides target was silently ignored.
    sweep = write(workdir / "so.yaml", "name: so\nsite_overrides:\n  baskervile: {env: {A: '1'}}\nexperiments:\n"
                                       "  - name: one\n    workload: gemm\n    sites: [baskerville]\n"
                                       "    site_overrides:\n      stanage: {env: {B: '1'}}\n"
                                       "      baskerville:a100_80: {env: {C: '1'}}\n    grid: {m: 64}\n")
    proc = run_orch("plan", str(sweep), cwd=workdir, env=ACCOUNT)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "so.yaml:3: site_overrides.baskervile: site_overrides names no site: " in proc.stderr
    assert "so.yaml:9: experiments[0].site_overrides.stanage:" in proc.stderr
    assert "a100_80" not in proc.stderr  # a system of a site the experiment names is a match


def test_the_polaris_rehearsal_plans_without_the_nccl_plugin_warning(workdir: Path) -> None:
    # Issue 53 message 12: the rehearsal copy kept NCCL_NET but dropped env_prepend (the plugin's
    # path), so every plan on it warned about the plugin.
    run_orch("sites", "rehearsal", "polaris", "-o", "reh", cwd=workdir, check=True)
    sweep = write(workdir / "p.yaml", "name: p\nexperiments:\n  - name: one\n    workload: gemm\n"
                                      "    sites: [polaris]\n    grid: {m: 64}\n")
    proc = run_orch("--sites-dir", "reh", "plan", str(sweep), cwd=workdir, env=ACCOUNT, check=True)
    assert "NCCL_NET" not in proc.stderr, proc.stderr


def test_a_gpt2_run_without_a_strategy_records_the_one_it_runs(workdir: Path) -> None:
    # Issue 53 message 14: a gpt2 run without `strategy:` stored no strategy (it runs ddp).
    sweep = write(workdir / "s.yaml", "name: s\nexperiments:\n  - name: one\n    workload: gpt2\n"
                                      "    sites: [stanage]\n    grid: {devices: 2, model: tiny}\n")
    run_orch("plan", str(sweep), cwd=workdir, env=ACCOUNT, check=True)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT strategy FROM runs", cwd=workdir, check=True).stdout)
    assert rows == [{"strategy": "ddp"}]


# Issue 53 message 8: a workload that refused its arguments showed "script exited with 2"; the
# program's own one-line error, in stderr.log, is shown with it.
REFUSING = 'sys.stderr.write("noise\\ngemm.py: error: argument --size-m: 0 is not a size\\n"); sys.exit(2)'
LOCAL_SITE = """\
name: standin
description: the local machine with a python that refuses its arguments (tests)
scheduler: local
python: {python}
device: {{type: cpu, model: stand-in, per_node: 2, precisions: [fp32]}}
queues: [{{name: local, max_nodes: 1, max_walltime: "01:00:00"}}]
launcher: {{name: python}}
"""


def test_a_refused_argument_shows_the_programs_own_error(workdir: Path) -> None:
    from tests.standin import stand_in_python

    fake = stand_in_python(workdir, REFUSING)
    write(workdir / "sites" / "standin.yaml", LOCAL_SITE.format(python=fake))
    env = {"ORCH_SITES_PATH": str(workdir / "sites")}
    sweep = write(workdir / "r.yaml", "name: r\nexperiments:\n  - name: one\n    workload: gemm\n"
                                      "    sites: [standin]\n    walltime: 10\n    share: true\n    grid: {m: 64}\n")
    run_orch("run", str(sweep), "--interval", "0.5", cwd=workdir, env=env)
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT reason FROM attempts", cwd=workdir, env=env,
                               check=True).stdout)
    assert rows == [{"reason": "script exited with 2: gemm.py: error: argument --size-m: 0 is not a size"}]


def test_llm_serving_values_the_program_refuses_are_skipped_at_plan() -> None:
    # Issue 53: llm_serving values that planned, then the job refused at start.
    from workloads.registry import get

    refusal = get("llm_serving").refusal
    assert refusal is not None
    base = {**get("llm_serving").defaults(), "devices": 1, "precision": "fp32"}
    assert refusal({**base, "arrival": "concurrency", "concurrency": 0}) == \
        "arrival concurrency needs concurrency of at least 1"
    assert refusal({**base, "num_requests": 0}) == "num_requests must be positive"
    assert refusal({**base, "server_tp": 0}) == "server_tp must be at least 1"
    assert refusal({**base, "arrival": "concurrency", "concurrency": 2}) is None


def test_table_numbers_are_never_folded_at_120_columns(workdir: Path) -> None:
    # Issue 53 message 14: at 120 columns, tables folded numbers across lines.
    run_orch("db", "upgrade", cwd=workdir, check=True)
    numbers = [f"{31415926535 + i}" for i in range(8)]
    query = "SELECT 'gpt2 fp32 ddp 2dev on baskerville' AS configuration, " + ", ".join(
        f"{n} AS column_{i}" for i, n in enumerate(numbers))
    out = run_orch("sql", query, cwd=workdir, env={"COLUMNS": "120"}, check=True).stdout
    for number in numbers:
        assert number in out, out


@pytest.mark.parametrize("expected_text", ['{"nodes": "many", "ranks": [1], "device_type": {"a": 1}}', "[1, 2]",
                                           "[" * 5000 + "]" * 5000, "not json"])
def test_a_tampered_probe_json_falls_back_to_the_probes_own_row(tmp_path: Path, expected_text: str) -> None:
    # probe.json lies beside the job's files, so the job can rewrite it too (issue 53).
    from sqlalchemy import select

    from orchestrator.results.db.engine import open_database
    from orchestrator.results.db.models import SiteProbe
    from orchestrator.run.executors.base import JobInfo, JobState
    from orchestrator.run.probe import finish_probe

    sessions = open_database(f"sqlite:///{tmp_path / 'p.db'}")
    run_dir = tmp_path / "probe"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text(json.dumps({"probe": GOOD_REPORT}))
    (run_dir / "probe.json").write_text(expected_text)
    with sessions.begin() as session:
        row = SiteProbe(site="local", profile_hash="h", profile_path="/p.yaml", state="submitted", scheduler="local",
                        job_id="1", run_dir=str(run_dir), token="TOKEN", nodes_requested=1, ranks_requested=1)
        session.add(row)
        session.flush()
        probe_id = row.id
    with sessions() as session:
        row = session.scalars(select(SiteProbe).where(SiteProbe.id == probe_id)).one()
    finish_probe(sessions, row, JobInfo(job_id="1", state=JobState.COMPLETED, exit_code=0))
    with sessions() as session:
        done = session.scalars(select(SiteProbe).where(SiteProbe.id == probe_id)).one()
    assert done.state == "finished" and done.checks, done.checks


def test_a_probe_refused_by_qsub_suggests_no_twin() -> None:
    # Issue 53 message 11: a probe qsub refused suggested `orch sites check` "on a twin", which a
    # PBS site has not.
    from orchestrator.run.probe_checks import Expected, JobEnd, judge

    expected = Expected(token="t", nodes=1, ranks=1, device_type="cuda", python="python3", backend="nccl",
                        run_dir="/r")
    pbs = judge(None, expected, JobEnd("refused", "qsub: Unknown queue", scheduler="pbs"), False)[0]
    assert "twin" not in pbs.fix and "orch sites rehearsal SITE" in pbs.fix and "Unknown queue" in pbs.detail
    slurm = judge(None, expected, JobEnd("refused", "sbatch: invalid account", scheduler="slurm"), False)[0]
    assert "`orch sites check SITE` on a twin" in slurm.fix
