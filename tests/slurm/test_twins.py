"""Site twins on the REAL sandbox Slurm: ``orch sandbox up --like SITE``, ``orch sites check``.

For every Slurm site (and both Slurm systems of the AI Testbed) the sandbox is reconfigured as
the site's twin; then

* ``orch sites check`` passes: every representative script is accepted by ``sbatch --test-only``;
* the twin refuses what the site would refuse: an unknown partition, account or QoS, a walltime
  over the partition's MaxTime, more nodes than the partition allows (and per site: a second GPU
  in JADE2's 1-GPU ``small``, Stanage's gpu-h100 without its QoS, an odd IPU count, ...);
* a 1-node tiny run completes on the twin with its metrics in the database: the site's profile
  rewritten by ``orch sites rehearsal`` (device cpu, this Python, no module lines, a launcher this
  machine has), whose batch directives are checked to be exactly the site's.

Twins are grouped (one switch per site); at the end the plain sandbox is restored for the tests
that come after.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import text as text_sql

from orchestrator.plan.record import plan_sweep
from orchestrator.plan.sweep import parse_sweep
from orchestrator.results.db.engine import open_database
from orchestrator.run.sitecheck import NoTwinError, check_site, rehearsal_profile, sbatch_test_only
from orchestrator.sites import sandbox
from orchestrator.sites.profiles import load_site
from orchestrator.sites.sandbox.proc import _clean_env
from orchestrator.timefmt import parse_walltime
from tests.conftest import run_orch, write
from tests.slurm.conftest import up_again

pytestmark = pytest.mark.slurm

ENV = {"ORCH_ACCOUNT": "twinproj", "ORCH_QOS": "twinqos"}
# site -> the targets `orch sites check` is run on (and the tiny run covers)
TWINS = {
    "baskerville": ["baskerville"],
    "dawn": ["dawn"],
    "cosma8": ["cosma8"],
    "stanage": ["stanage"],
    "jade2": ["jade2"],
    "alcf-ai-testbed": ["alcf-ai-testbed:sambanova", "alcf-ai-testbed:graphcore"],
    "perlmutter": ["perlmutter"],
    "lumi": ["lumi"],
    "dgx": ["dgx:h100", "dgx:a100_80"],
    "gaudi2-cluster": ["gaudi2-cluster"],
    "graphcore-pod16": ["graphcore-pod16"],
}


def _wait_queue_empty(timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, timeout=30,
                             env=_clean_env()).stdout
        if not out.split():
            return
        time.sleep(1)


@pytest.fixture(scope="module")
def plain_afterwards(cluster):
    """Restore the plain sandbox when the module is done (the tests after these need it)."""
    yield
    st = sandbox.up()
    assert st.ok and st.twin is None, st.as_dict()
    assert {"debug", "batch"} <= set(st.partitions) and st.default_partition == "debug"
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30,
                            env=_clean_env()).stdout
    enforce = [ln for ln in config.splitlines() if ln.startswith("AccountingStorageEnforce")]
    assert enforce and enforce[0].split("=", 1)[1].strip() == "none", enforce


@pytest.fixture(scope="module", params=list(TWINS))
def twin(request, plain_afterwards) -> str:
    site = request.param
    _wait_queue_empty()
    st = sandbox.up(like=site, env=ENV, force=True)
    assert st.ok and st.twin == site, st.as_dict()
    return site


def test_twin_is_up_idempotent_and_shaped_like_the_site(twin: str) -> None:
    st = up_again(like=twin, env=ENV)  # no restart, nothing rewritten
    assert st.ok and st.twin == twin and st.enforce == "associations,limits,qos"
    queues = {q.name for target in TWINS[twin] for q in load_site(target).queues if not q.implicit}
    assert queues <= set(st.partitions), (queues, st.partitions)
    if any(q.implicit for target in TWINS[twin] for q in load_site(target).queues):
        assert st.default_partition == "site-default"
    if twin == "jade2":  # the command line says it too (once: each orch process costs seconds here)
        shown = json.loads(run_orch("sandbox", "status", "--json", cwd=Path("/tmp"), check=True).stdout)
        assert shown["twin"] == twin and shown["enforce"] == "associations,limits,qos"


def test_sites_check_passes_against_the_twin(twin: str, tmp_path: Path) -> None:
    # `orch sites check SITE` checks every Slurm system of the site (the AI Testbed: sambanova and
    # graphcore, its PBS and appliance systems listed as having no twin); one orch process per site.
    proc = run_orch("sites", "check", twin, "--json", cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["twin"] == twin and report["ok"]
    checked = {row["target"] for row in report["checks"] if row["result"] != "no twin"}
    assert set(TWINS[twin]) <= checked, checked
    assert {row["result"] for row in report["checks"] if row["target"] in checked} <= {"accepted", "skipped"}, \
        report["checks"]
    if twin == "alcf-ai-testbed":
        assert {row["target"] for row in report["checks"] if row["result"] == "no twin"} == {
            "alcf-ai-testbed:groq", "alcf-ai-testbed:cerebras", "alcf-ai-testbed:gaudi"}
    for name in checked:
        results = {row["shape"]: row for row in report["checks"] if row["target"] == name}
        assert all(results[s]["result"] == "accepted" for s in ("1-device", "1-node")), results
        largest = results["largest-queue"]
        if largest["result"] == "skipped":  # a queue larger than the twin's virtual nodes (Perlmutter, LUMI)
            assert "the twin holds" in largest["detail"] and largest["nodes"] > sandbox.TWIN_MAX_NODES, largest
        else:
            assert largest["result"] == "accepted", results
        if load_site(name).max_nodes >= 2:
            assert results["2-nodes"]["result"] == "accepted", results
        else:  # said so, not silently dropped
            assert results["2-nodes"]["result"] == "skipped" and "at most" in results["2-nodes"]["detail"]
        if name.endswith(":graphcore") or name == "graphcore-pod16":
            assert all(any("SPANK" in n for n in row["notes"]) for row in results.values()
                       if row["result"] == "accepted")
    if twin == "stanage":  # the table for people (once), naming one system the site:system way
        proc = run_orch("sites", "check", "stanage:a100", cwd=tmp_path, env=ENV)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        for words in ("stanage:a100", "largest-queue", "accepted", "skipped", "at most"):
            assert words in proc.stdout, (words, proc.stdout)
        assert "gpu-h100" not in proc.stdout  # only the system named
        assert re.search(r"\b(\d+) of \1 script\(s\) accepted", proc.stdout), proc.stdout


def _over(seconds: int) -> str:
    seconds += 60
    days, rest = divmod(seconds, 86400)
    return f"{days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:00"


def test_the_twin_refuses_what_the_site_would(twin: str, tmp_path: Path) -> None:
    target = TWINS[twin][0]
    report = check_site(target, ENV, bring_up=False, workdir=tmp_path)
    row = next(r for r in report.rows if r.shape == "1-device")
    assert row.result == "accepted" and row.script is not None, row
    script = Path(row.script)
    profile = load_site(target)
    queue = next(q for q in profile.queues if (q.name == row.queue) or (q.implicit and row.queue == "(default)"))

    def refused(*options: str) -> str:
        proc = subprocess.run(["sbatch", "--test-only", *options, str(script)], capture_output=True, text=True,
                              timeout=60, env=_clean_env())
        assert proc.returncode != 0, (options, proc.stdout, proc.stderr)
        return proc.stdout + proc.stderr

    assert "invalid partition" in refused("--partition=no-such-partition").lower()
    assert "time limit" in refused(f"--time={_over(parse_walltime(queue.max_walltime))}")
    assert "Invalid account" in refused("--account=no-such-account")
    assert "Invalid qos" in refused("--qos=no-such-qos")
    assert "Node count specification invalid" in refused(f"--nodes={queue.max_nodes + 1}")
    # What is particular to each site.
    if twin == "jade2":  # small: 1 GPU per job
        assert "QOSMaxGRESPerJob" in refused("--gres=gpu:2")
    if twin == "stanage":  # gpu-h100 takes QoS gpu only
        assert "Invalid qos" in refused("--qos=normal")
    if twin == "dawn":  # 4 GPUs (cards) per node
        assert "node configuration is not available" in refused("--gres=gpu:5")
    if twin == "baskerville":  # 144 CPUs per node; a100_80 is a feature of some nodes
        assert "node configuration is not available" in refused("--gpus-per-node=4", "--cpus-per-gpu=37",
                                                               "--ntasks-per-node=4")
        assert "Invalid feature" in refused("--constraint=h100_80")
    if twin == "lumi":  # 8 GCDs per node, counted as GPUs by Slurm
        assert "node configuration is not available" in refused("--gpus-per-node=9")
    if twin == "dgx":  # 8 GPUs per node
        assert "node configuration is not available" in refused("--gres=gpu:9")
    if twin == "alcf-ai-testbed":  # SambaNova: 8 RDUs per node; Graphcore: IPU counts are powers of two
        assert "node configuration is not available" in refused("--gres=rdu:9")
        graphcore = check_site("alcf-ai-testbed:graphcore", ENV, bring_up=False, workdir=tmp_path / "gc")
        gc_row = next(r for r in graphcore.rows if r.shape == "1-device")
        assert gc_row.script is not None, gc_row
        gc_script = Path(gc_row.script)
        ok, message = sbatch_test_only(gc_script)
        assert ok, message
        bad = tmp_path / "ipus3.sh"
        bad.write_text(gc_script.read_text().replace("#SBATCH --ipus=1", "#SBATCH --ipus=3"))
        ok, message = sbatch_test_only(bad)
        assert not ok and "--ipus" in message, message


def _directives(script: str) -> list[str]:
    # The run's own names (job name, comment: its run id) differ between two sweeps of one shape.
    return sorted(ln for ln in script.splitlines()
                  if ln.startswith("#SBATCH") and not ln.startswith(("#SBATCH --output", "#SBATCH --error",
                                                                     "#SBATCH --comment", "#SBATCH --job-name")))


def test_a_tiny_run_completes_on_the_twin_with_the_sites_directives(twin: str, tmp_path: Path) -> None:
    targets = TWINS[twin]
    filename, text, changes = rehearsal_profile(twin)
    write(tmp_path / "sites" / filename, text)
    assert any("device" in c and "-> cpu" in c for c in changes), changes
    # One experiment per target, in a precision the target's profile offers (SambaNova: bf16 only).
    experiments = "".join(f"""\
  - name: tiny-{index}
    workload: gemm
    sites: [{target}]
    walltime: "00:10:00"
    grid: {{devices: 1, precision: {load_site(target, [tmp_path / "sites"]).device.precisions[0]}, m: 64, n: 64, k: 64,
            warmup: 1, iters: 3}}
""" for index, target in enumerate(targets))
    sweep = write(tmp_path / "tiny.yaml", f"name: twin-{twin}\nexperiments:\n{experiments}")
    db = f"sqlite:///{tmp_path / 'twin.db'}"
    proc = run_orch("--db", db, "--sites-dir", str(tmp_path / "sites"), "run", str(sweep), "--interval", "1",
                    "--json", cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == len(targets)
    assert all(r["status"] == "completed" and r["tflops"] and r["tflops"] > 0 for r in rows), rows
    with open_database(db)() as session:
        runs = [dict(r._mapping) for r in session.execute(text_sql(
            "SELECT r.id, r.device_type, r.script, m.node_list, m.tflops FROM runs r "
            "JOIN results m ON m.run_id = r.id"))]
    assert len(runs) == len(targets)
    assert {r["device_type"] for r in runs} == {"cpu"} and all(r["node_list"] and r["tflops"] > 0 for r in runs)
    # The directives are the site's own: the same shape planned on the real profile. A system that
    # runs a vendor's tool cannot run the GEMM there (it is skipped), so its representative model
    # (the one `orch sites check` submits) stands in: the #SBATCH header depends on the shape only.
    from orchestrator.run.sitecheck import check_case

    real_experiments = ""
    for index, target in enumerate(targets):
        profile = load_site(target)
        case = check_case(profile.launcher.name)
        workload, batch, seq, params = case or ("gemm", None, None, (("m", 64), ("n", 64), ("k", 64)))
        grid = {"devices": 1, "precision": load_site(target, [tmp_path / "sites"]).device.precisions[0],
                **dict(params), **({"batch_size": batch} if batch else {}), **({"seq_len": seq} if seq else {})}
        if case and grid["precision"] not in profile.device.precisions:
            grid["precision"] = profile.device.precisions[0]
        real_experiments += (f"  - name: tiny-{index}\n    workload: {workload}\n    sites: [{target}]\n"
                             f"    walltime: \"00:10:00\"\n    grid: {json.dumps(grid)}\n")
    real_sweep = write(tmp_path / "real.yaml", f"name: twin-{twin}\nexperiments:\n{real_experiments}")
    # The real profiles may require a Python environment the user names (python_env): stand-ins,
    # as `orch sites check` gives them; only the #SBATCH header is compared.
    from orchestrator.run.sitecheck import check_env

    real_env: dict[str, str] = dict(ENV)
    for target in targets:
        real_env = check_env(load_site(target), real_env)
    real = {p.spec.experiment: p.script for p in plan_sweep(parse_sweep(real_sweep), tmp_path / "real",
                                                                 env=real_env)}
    with open_database(db)() as session:
        experiment_of: dict[str, str] = dict(session.execute(text_sql("SELECT id, experiment FROM runs")).all())
    for run in runs:
        script = real[experiment_of[run["id"]]]
        assert script is not None, experiment_of[run["id"]]
        assert _directives(run["script"]) == _directives(script), run["id"]


def test_the_probe_passes_on_the_twin(twin: str, tmp_path: Path) -> None:
    """`orch sites probe` of each target's rehearsal profile on the twin: the site's directives, this
    machine's CPU; every check passes (two ranks meet, the run directory is seen), the verdict is in
    `orch sites show` and in SQL. Where the profile has two nodes of two devices (COSMA8), `--nodes 2`
    too: four ranks over two virtual nodes."""
    filename, text, _ = rehearsal_profile(twin)
    sites = tmp_path / "sites"
    write(sites / filename, text)
    for target in TWINS[twin]:
        proc = run_orch("--sites-dir", str(sites), "sites", "probe", target, "--json", "--timeout", "240",
                        cwd=tmp_path, env=ENV, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        probe = json.loads(proc.stdout)["probes"][0]
        assert probe["passed"] and probe["target"] == target and probe["run_dir_visible"], probe["checks"]
        assert probe["allreduce_backend"] == "gloo" and probe["nodes"] == 1 and probe["ranks_requested"] >= 1
        shown = run_orch("--sites-dir", str(sites), "sites", "show", target, cwd=tmp_path, env=ENV, check=True)
        assert f"probe: #{probe['id']} passed" in shown.stdout
    if twin == "cosma8":
        proc = run_orch("--sites-dir", str(sites), "sites", "probe", twin, "--nodes", "2", "--json", cwd=tmp_path,
                        env=ENV, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert json.loads(proc.stdout)["probes"][0]["ranks_requested"] == 4
    rows = json.loads(run_orch("sql", "-f", "json", "SELECT site, system, passed, nodes FROM site_probes ORDER BY id",
                               cwd=tmp_path, check=True).stdout)
    assert [(r["site"] + (f":{r['system']}" if r["system"] else "")) for r in rows][:len(TWINS[twin])] == TWINS[twin]
    assert all(r["passed"] for r in rows) and [r["nodes"] for r in rows] == [1] * len(TWINS[twin]) + (
        [2] if twin == "cosma8" else [])


def test_sites_without_a_slurm_system_have_no_twin(tmp_path: Path) -> None:
    before = sandbox.active_layout().to_json()
    proc = run_orch("sites", "check", "polaris", cwd=tmp_path, env=ENV)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "PBS" in proc.stdout and "no twin" in proc.stdout and "emulator" in proc.stdout
    for target, words in (("alcf-ai-testbed:groq", "PBS"), ("alcf-ai-testbed:cerebras", "appliance")):
        with pytest.raises(NoTwinError, match=f"{words}.*no twin|no twin.*{words}") as err:
            check_site(target, ENV)
        assert err.value.exit_code == 2
    with pytest.raises(sandbox.SandboxError, match="no Slurm system"):
        sandbox.twin_layout("polaris")
    assert sandbox.active_layout().to_json() == before  # the sandbox was not touched
