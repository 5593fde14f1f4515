"""Pure parsing of Slurm output: no cluster needed (these run anywhere).

The sacct text below was captured from the sandbox cluster (Slurm 22.05.8) with
``sacct --parsable2 -o JobID,JobName,State,ExitCode,Elapsed,NodeList,MaxRSS,Reason,Start,End``;
the lines marked "synthetic" are states the sandbox cannot produce on demand, written
in the same format from Slurm's documentation.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.run.executors.base import FailureClass, JobRequest, JobState
from orchestrator.run.executors.slurm import array_wrapper_text, parse_directives
from orchestrator.run.executors.slurm_outputs import (
    classify,
    expand_job_id,
    is_transient_sbatch_error,
    job_infos,
    parse_elapsed,
    parse_exit_code,
    parse_rss_mb,
    parse_sacct,
    parse_squeue,
)

CAPTURED = """\
JobID|JobName|State|ExitCode|Elapsed|NodeList|MaxRSS|Reason|Start|End
32|orch-timeout-bfee7b1b-a1|TIMEOUT|0:0|00:01:07|n1||None|2026-11-22T08:32:45|2026-11-22T08:33:52
32.batch|batch|CANCELLED|0:15|00:01:07|n1|4708K||2026-11-22T08:32:45|2026-11-22T08:33:52
33|orch-oom-bfee7b1b-a1|OUT_OF_MEMORY|0:125|00:00:00|n1||None|2026-11-22T08:32:45|2026-11-22T08:32:45
33.batch|batch|OUT_OF_MEMORY|0:125|00:00:00|n1|3472K||2026-11-22T08:32:45|2026-11-22T08:32:45
34|orch-exit3-bfee7b1b-a1|FAILED|3:0|00:00:00|n2||None|2026-11-22T08:32:45|2026-11-22T08:32:45
34.batch|batch|FAILED|3:0|00:00:00|n2|1248K||2026-11-22T08:32:45|2026-11-22T08:32:45
35|orch-cancel-bfee7b1b-a1|RUNNING|0:0|00:01:39|n2||None|2026-11-22T08:32:45|Unknown
35.batch|batch|RUNNING|0:0|00:01:39|n2|||2026-11-22T08:32:45|Unknown
36|orch-badout-bfee7b1b-a1|FAILED|0:53|00:00:00|n3||None|2026-11-22T08:32:45|2026-11-22T08:32:45
36.batch|batch|CANCELLED|0:53|00:00:00|n3|||2026-11-22T08:32:45|2026-11-22T08:32:45
37|orch-mn-bfee7b1b-a1|COMPLETED|0:0|00:00:05|n[3-4]||None|2026-11-22T08:32:45|2026-11-22T08:32:50
37.batch|batch|COMPLETED|0:0|00:00:05|n3|12456K||2026-11-22T08:32:45|2026-11-22T08:32:50
37.0|python|COMPLETED|0:0|00:00:05|n[3-4]|227992K||2026-11-22T08:32:45|2026-11-22T08:32:50
1|oom.sh|FAILED|0:9|00:00:01|n1||None|2026-11-22T08:28:34|2026-11-22T08:28:35
1.batch|batch|CANCELLED by 0|0:9|00:00:01|n1|583684K||2026-11-22T08:28:34|2026-11-22T08:28:35
19_0|wrap|CANCELLED by 0|0:0|00:00:01|n1||None|2026-11-22T08:31:25|2026-11-22T08:31:26
19_0.batch|batch|CANCELLED|0:15|00:00:01|n1|1248K||2026-11-22T08:31:25|2026-11-22T08:31:26
66_0|wrap|COMPLETED|0:0|00:00:00|n1||JobHeldUser|2026-11-22T08:34:37|2026-11-22T08:34:37
66_0.batch|batch|COMPLETED|0:0|00:00:00|n1|1244K||2026-11-22T08:34:37|2026-11-22T08:34:37
66_[6-9%3]|wrap|PENDING|0:0|00:00:00|None assigned||JobArrayTaskLimit|Unknown|Unknown
77|allocation|PENDING|0:0|00:00:01|n1||None|2026-11-22T08:34:39|Unknown
77.batch|batch|RUNNING|0:0|00:00:01|n1|||2026-11-22T08:34:39|Unknown
78|allocation|CANCELLED by 0|0:0|00:00:00|None assigned||None|2026-11-22T08:34:40|2026-11-22T08:34:40
"""

SYNTHETIC = """\
JobID|JobName|State|ExitCode|Elapsed|NodeList|MaxRSS|Reason|Start|End
901|x|NODE_FAIL|0:0|01:02:03|n4||None|2026-01-01T00:00:00|2026-01-01T01:02:03
902|x|PREEMPTED|0:15|1-00:00:01|n1||None|2026-01-01T00:00:00|2026-01-02T00:00:01
903|x|BOOT_FAIL|0:0|00:00:00|n2||None|2026-01-01T00:00:00|2026-01-01T00:00:00
904|x|REQUEUED|0:0|00:00:10|n2||BeginTime|2026-01-01T00:00:00|2026-01-01T00:00:10
905|x|SUSPENDED|0:0|00:05:00|n3||None|2026-01-01T00:00:00|Unknown
906|x|SOMETHING_NEW|0:0|00:00:00|n3||None|Unknown|Unknown
907|x|PENDING|0:0|00:00:00|None assigned||Resources|Unknown|Unknown
908|x|DEADLINE|0:0|00:10:00|n1||None|2026-01-01T00:00:00|2026-01-01T00:10:00
909|x|FAILED|1:0|00:00:02|n1||launch failed requeued held|2026-01-01T00:00:00|2026-01-01T00:00:02
910|x|FAILED|0:11|00:00:02|n1||None|2026-01-01T00:00:00|2026-01-01T00:00:02
911|x|COMPLETING|0:0|00:00:02|n1||None|2026-01-01T00:00:00|Unknown
912|x|FAILED|0:0|00:00:00|n1||None|2026-01-01T00:00:00|2026-01-01T00:00:00
"""


def infos_for(text, ids):
    return job_infos(parse_sacct(text), ids)


def test_small_parsers():
    assert parse_exit_code("3:0") == (3, 0)
    assert parse_exit_code("0:9") == (0, 9)
    assert parse_exit_code("") == (None, None)
    assert parse_exit_code("x") == (None, None)
    assert parse_elapsed("00:01:07") == 67
    assert parse_elapsed("1-00:00:01") == 86401
    assert parse_elapsed("05:03.500") == 303.5
    assert parse_elapsed("INVALID") is None and parse_elapsed("") is None
    assert parse_rss_mb("4708K") == pytest.approx(4708 / 1024)
    assert parse_rss_mb("12.5M") == 12.5
    assert parse_rss_mb("2G") == 2048
    assert parse_rss_mb("0") == 0
    assert parse_rss_mb("") is None
    assert expand_job_id("66_[6-9%3]") == ["66_6", "66_7", "66_8", "66_9"]
    assert expand_job_id("7_[1,3-4]") == ["7_1", "7_3", "7_4"]
    assert expand_job_id("12") == ["12"]
    assert expand_job_id("7_3") == ["7_3"]


def test_failure_classes_from_captured_sacct():
    got = infos_for(CAPTURED, ["32", "33", "34", "35", "36", "37", "1", "19_0", "78"])
    assert got["32"].state == JobState.FAILED and got["32"].failure == FailureClass.TIMEOUT
    assert got["32"].elapsed_s == 67
    assert got["33"].failure == FailureClass.OUT_OF_MEMORY
    assert got["34"].failure == FailureClass.FAILED and got["34"].exit_code == 3
    assert got["35"].state == JobState.RUNNING and got["35"].finished_at is None
    assert got["35"].started_at == "2026-11-22T08:32:45"
    assert got["36"].failure == FailureClass.LAUNCH_ERROR  # "died by signal 53": IO setup failed
    assert got["37"].state == JobState.COMPLETED and got["37"].exit_code == 0
    assert got["37"].node_list == "n[3-4]"
    assert got["37"].max_rss_mb == pytest.approx(227992 / 1024)  # largest step wins
    assert got["37"].extra["steps"] == {"batch": "COMPLETED", "0": "COMPLETED"}
    # killed by SIGKILL without a cgroup (OverMemoryKill): FAILED, 128+9, signal kept
    assert got["1"].failure == FailureClass.FAILED and got["1"].exit_code == 137
    assert got["1"].extra["signal"] == 9
    assert got["19_0"].failure == FailureClass.CANCELLED
    assert got["78"].failure == FailureClass.CANCELLED and got["78"].node_list is None


def test_array_ranges_pending_reason_and_unknown_ids():
    got = infos_for(CAPTURED, ["66_0", "66_7", "66_9", "66_3", "12345"])
    assert got["66_0"].state == JobState.COMPLETED
    assert got["66_0"].reason is None  # a stale pending reason is not kept once it ran
    assert got["66_0"].extra["slurm_reason"] == "JobHeldUser"
    for jid in ("66_7", "66_9"):
        assert got[jid].state == JobState.PENDING
        assert got[jid].reason == "JobArrayTaskLimit"
        assert got[jid].elapsed_s is None and got[jid].started_at is None
    assert got["66_3"].state == JobState.UNKNOWN  # running but not yet in accounting
    assert got["12345"].state == JobState.UNKNOWN


def test_job_line_lagging_behind_its_step_is_running():
    got = infos_for(CAPTURED, ["77"])
    assert got["77"].state == JobState.RUNNING


def test_synthetic_states():
    ids = [str(i) for i in range(901, 913)]
    got = infos_for(SYNTHETIC, ids)
    assert got["901"].failure == FailureClass.NODE_FAILURE and got["901"].elapsed_s == 3723
    assert got["902"].failure == FailureClass.PREEMPTED
    assert got["903"].failure == FailureClass.LAUNCH_ERROR
    assert got["904"].state == JobState.PENDING and got["904"].reason == "BeginTime"
    assert got["905"].state == JobState.RUNNING
    assert got["906"].state == JobState.UNKNOWN and got["906"].failure is None
    assert got["907"].state == JobState.PENDING and got["907"].reason == "Resources"
    assert got["908"].failure == FailureClass.TIMEOUT
    assert got["909"].failure == FailureClass.LAUNCH_ERROR
    assert got["910"].failure == FailureClass.FAILED and got["910"].exit_code == 139
    assert got["911"].state == JobState.RUNNING
    assert got["912"].failure == FailureClass.LAUNCH_ERROR


def test_classify_never_raises():
    for state in ("", "   ", "CANCELLED+", "weird state", "PENDING", "OUT_OF_MEMORY"):
        st, *_ = classify(state, "garbage", "x", ["?", ""])
        assert isinstance(st, JobState)
    # a FAILED job whose step hit the OOM killer is out of memory
    st, failure, _, _ = classify("FAILED", "0:9", "None", ["OUT_OF_MEMORY", "COMPLETED"])
    assert failure == FailureClass.OUT_OF_MEMORY


def test_parse_sacct_tolerates_no_header_and_blank_input():
    assert parse_sacct("") == {}
    recs = parse_sacct("5|n|COMPLETED|0:0|00:00:01|n1|1M|None|a|b\n")
    assert recs["5"].state == "COMPLETED" and recs["5"].max_rss_mb == 1.0


def test_parse_squeue_keeps_only_live_states():
    text = "19_1|PENDING|JobArrayTaskLimit|\n19_0|RUNNING|None|n1\n20|COMPLETED|None|n2\n21_[3-4]|PENDING|Priority|\n"
    got = parse_squeue(text)
    assert got["19_1"].state == JobState.PENDING and got["19_1"].reason == "JobArrayTaskLimit"
    assert got["19_0"].state == JobState.RUNNING and got["19_0"].node_list == "n1"
    assert "20" not in got  # an end is for sacct to report, with its exit code
    assert got["21_4"].reason == "Priority"


# --------------------------------------------------------------------------------------
# Directives and the array wrapper
# --------------------------------------------------------------------------------------

SCRIPT = """#!/bin/bash -l
# a comment
#SBATCH --job-name=mine -N 2 --ntasks-per-node=4
#SBATCH -o /runs/x/slurm-%j.out
#SBATCH --error /runs/x/err-%j.txt
#SBATCH -p gpu --time=01:00:00   # trailing comment
#SBATCH --exclusive
#SBATCH -J other -D /runs/x
#SBATCH --open-mode=append

srun hostname
#SBATCH --not-a-directive-after-a-command
"""


def test_parse_directives():
    d = parse_directives(SCRIPT)
    assert d.shebang == "/bin/bash -l"
    assert d.owned == {
        "job-name": "other", "output": "/runs/x/slurm-%j.out", "error": "/runs/x/err-%j.txt",
        "chdir": "/runs/x", "open-mode": "append",
    }
    assert d.lines == [["-N", "2", "--ntasks-per-node=4"], ["-p", "gpu", "--time=01:00:00"], ["--exclusive"]]
    assert {"partition", "nodes", "time", "exclusive"} <= d.all_options
    assert "not-a-directive-after-a-command" not in d.all_options


def _req(tmp: Path, i: int, out: str | None, err: str | None = None) -> tuple[JobRequest, str]:
    run_dir = tmp / f"run{i}"
    run_dir.mkdir()
    script = run_dir / "job.sh"
    lines = ["#!/bin/bash", "#SBATCH --time=00:05:00 -N 1"]
    if out:
        lines.append(f"#SBATCH --output={out}")
    if err:
        lines.append(f"#SBATCH --error={err}")
    lines += ["echo out $ORCH_RUN_ID $SLURM_ARRAY_TASK_ID", "echo err >&2", "pwd"]
    text = "\n".join(lines) + "\n"
    script.write_text(text)
    req = JobRequest(run_id=f"r{i}", attempt=1, script_path=script, run_dir=run_dir,
                     job_name=f"orch-r{i}-a1", walltime_s=300, nodes=1, tasks_per_node=1, shape_key="k")
    return req, text


def test_array_wrapper_runs_each_task_script_with_its_output(tmp_path):
    pairs = [
        _req(tmp_path, 0, str(tmp_path / "run0" / "slurm-%A_%a.out")),
        _req(tmp_path, 1, "rel-%x-%j.log", str(tmp_path / "run1" / "e-%a.err")),
        _req(tmp_path, 2, None),
    ]
    reqs = [p[0] for p in pairs]
    texts = [p[1] for p in pairs]
    logdir = tmp_path / "arrays"
    logdir.mkdir()
    wrapper = array_wrapper_text(reqs, texts, "0-2%2", "orch-array-abc", logdir)
    assert "#SBATCH --time=00:05:00 -N 1" in wrapper
    assert "#SBATCH --array=0-2%2" in wrapper and "#SBATCH --job-name=orch-array-abc" in wrapper
    assert wrapper.count("#SBATCH --output=") == 1  # the tasks' own outputs are not directives
    wpath = tmp_path / "wrapper.sh"
    wpath.write_text(wrapper)
    for i in range(3):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(SLURM_ARRAY_TASK_ID=str(i), SLURM_ARRAY_JOB_ID="500", SLURM_JOB_ID=str(600 + i))
        cp = subprocess.run(["bash", str(wpath)], env=env, capture_output=True, text=True, cwd=tmp_path)
        assert cp.returncode == 0, cp.stderr
    out0 = (tmp_path / "run0" / "slurm-500_0.out").read_text().split("\n")
    assert out0[0] == "out r0 0" and "err" in out0 and str(tmp_path / "run0") in out0
    out1 = (tmp_path / "run1" / "rel-orch-r1-a1-601.log").read_text()
    assert out1.startswith("out r1 1") and "err" not in out1
    assert (tmp_path / "run1" / "e-1.err").read_text() == "err\n"
    assert (tmp_path / "run2" / "slurm-500_2.out").read_text().startswith("out r2 2")
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="7")
    cp = subprocess.run(["bash", str(wpath)], env=env, capture_output=True, text=True)
    assert cp.returncode == 98


def test_transient_sbatch_errors_are_told_from_rejections():
    assert is_transient_sbatch_error(
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)")
    assert is_transient_sbatch_error(
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation")
    assert not is_transient_sbatch_error(
        "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)")
    assert not is_transient_sbatch_error("sbatch: error: Batch job submission failed: Invalid partition name specified")


def test_a_failed_array_task_carries_its_wrapper_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An array task whose wrapper could not open the run's stdout.log (issue 30: an unwritable run
    directory) exits 1 before the program starts: the reason holds the wrapper log's cause."""
    from orchestrator.run.executors.slurm import SlurmExecutor

    ex = SlurmExecutor(tmp_path)
    (tmp_path / "arrays").mkdir()
    (tmp_path / "arrays" / "41_0.wrapper.log").write_text(
        "/tmp/orch-array.sh: line 9: /runs/r1/stdout.log: Permission denied\n")
    sacct = ("JobID|JobName|State|ExitCode|Elapsed|NodeList|MaxRSS|Reason|Start|End\n"
             "41_0|orch-array-x|FAILED|1:0|00:00:00|n1||None|2026-11-22T08:32:45|2026-11-22T08:32:45\n"
             "41_1|orch-array-x|FAILED|1:0|00:00:00|n1||None|2026-11-22T08:32:45|2026-11-22T08:32:45\n")
    monkeypatch.setattr(ex, "_cmd", lambda name, args, timeout=120: subprocess.CompletedProcess([name], 0, sacct, ""))
    infos = ex.query(["41_0", "41_1"])
    assert infos["41_0"].reason and infos["41_0"].reason.endswith("stdout.log: Permission denied"), infos["41_0"]
    assert "Permission denied" not in (infos["41_1"].reason or "")  # no wrapper log: as before
