"""The PBS executor (orch's interface and the submitit plugin) against the PBS emulator."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import submitit
from submitit.core import plugins

from orchestrator.run.executors import FailureClass, JobInfo, JobRequest, JobState, executor_for
from orchestrator.run.executors.pbs import OrchPbsExecutor, PbsExecutor, PbsJobEnvironment
from tests.pbs.conftest import gate


def request(tmp_path: Path, name: str, body: str, shape: str = "", directives: str = "") -> JobRequest:
    run_dir = tmp_path / "runs" / name
    run_dir.mkdir(parents=True)
    script = run_dir / "job.sh"
    script.write_text(f"#!/bin/bash\n#PBS -N ignored-{name}\n#PBS -l select=1:ncpus=1\n#PBS -l walltime=00:01:00\n"
                      f"{directives}echo running {name}\n{body}\n")
    return JobRequest(run_id=name, attempt=1, script_path=script, run_dir=run_dir, job_name=f"orch-{name}-a1",
                      walltime_s=60, nodes=1, tasks_per_node=1, shape_key=shape)


def submit_all(executor: OrchPbsExecutor, reqs: list[JobRequest]) -> list[str]:
    """Submit requests the test expects all submitted: their job ids, in the requests' order."""
    result = executor.submit(reqs)
    ids = [jid for jid in result.job_ids if jid is not None]
    assert len(ids) == len(reqs), result
    return ids


def wait(executor: OrchPbsExecutor, ids: list[str], timeout: float = 60) -> dict[str, JobInfo]:
    deadline = time.time() + timeout
    while True:
        infos = executor.query(ids)
        if all(i.ended for i in infos.values()) or time.time() > deadline:
            return infos
        time.sleep(0.2)


def test_plugin_is_registered_with_submitit() -> None:
    assert plugins.get_executors()["pbs"] is PbsExecutor
    assert isinstance(plugins.get_job_environments()["pbs"], PbsJobEnvironment)


def test_orch_finds_the_pbs_executor(tmp_path: Path) -> None:
    assert isinstance(executor_for("pbs", tmp_path), OrchPbsExecutor)


def test_submit_single_and_arrays_then_one_qstat_per_query(pbs, tmp_path: Path) -> None:
    ex = OrchPbsExecutor(tmp_path / "ex")
    reqs = [request(tmp_path, "solo", "exit 0"),
            request(tmp_path, "a0", "exit 0", shape="s"),
            request(tmp_path, "a1", "exit 4", shape="s"),
            request(tmp_path, "a2", "exit 0", shape="s"),
            request(tmp_path, "lonely", "exit 0", shape="t")]  # a group of one: a plain job
    ids = submit_all(ex, reqs)
    seq = ids[1].split("[")[0]
    assert ids[1:4] == [f"{seq}[0].pbs01", f"{seq}[1].pbs01", f"{seq}[2].pbs01"]
    assert "[" not in ids[0] and "[" not in ids[4]
    qsubs = pbs.calls("qsub")
    assert len(qsubs) == 3 and sum("-J" in c for c in qsubs) == 1
    array_call = next(c for c in qsubs if "-J" in c)
    assert array_call[array_call.index("-J") + 1] == "0-2" and "-V" not in sum(qsubs, [])
    # Explicit output paths (PBS does not expand %j); ^array_index^ for the array.
    assert any(a.endswith(".^array_index^.out") for a in array_call)
    before = len(pbs.calls("qstat"))
    infos = wait(ex, ids)
    assert {k: (v.state, v.exit_code) for k, v in infos.items()} == {
        ids[0]: (JobState.COMPLETED, 0), ids[1]: (JobState.COMPLETED, 0), ids[2]: (JobState.FAILED, 4),
        ids[3]: (JobState.COMPLETED, 0), ids[4]: (JobState.COMPLETED, 0)}
    assert infos[ids[2]].failure == FailureClass.FAILED
    # Each query was ONE qstat call naming every job (the array once).
    per_query = pbs.calls("qstat")[before:]
    assert per_query and all(len(c) == 1 + 5 + 3 for c in per_query)
    assert ex.calls["qstat"] == len(per_query)
    # Ids without the server part are the same jobs.
    short = [i.split(".")[0] for i in ids[:2]]
    assert [v.state for v in ex.query(short).values()] == [JobState.COMPLETED, JobState.COMPLETED]
    # The run's own output went to its run directory as it was written.
    assert "running a1" in (tmp_path / "runs" / "a1" / "stdout.log").read_text()


def test_failure_classes_end_to_end(pbs, tmp_path: Path) -> None:
    ex = OrchPbsExecutor(tmp_path / "ex")
    reqs = [request(tmp_path, "slow", "sleep 30", directives="#PBS -l walltime=00:00:01\n"),
            request(tmp_path, "fat", "python3 -c 'x = bytearray(200 * 2**20); import time; time.sleep(30)'",
                    directives="#PBS -l select=1:ncpus=1:mem=20mb\n"),
            request(tmp_path, "cancel_me", "sleep 30"),
            request(tmp_path, "segv", "kill -SEGV $$")]
    ids = submit_all(ex, reqs)
    deadline = time.time() + 30
    while ex.query([ids[2]])[ids[2]].state != JobState.RUNNING and time.time() < deadline:
        time.sleep(0.1)
    ex.cancel([ids[2]])
    infos = wait(ex, ids)
    got = {r.run_id: (infos[i].state, infos[i].failure) for r, i in zip(reqs, ids)}
    assert got == {"slow": (JobState.FAILED, FailureClass.TIMEOUT),
                   "fat": (JobState.FAILED, FailureClass.OUT_OF_MEMORY),
                   "cancel_me": (JobState.FAILED, FailureClass.CANCELLED),
                   "segv": (JobState.FAILED, FailureClass.FAILED)}
    ex.cancel(ids)  # all finished: qdel's rc 35 is not an error


def test_cancel_a_queued_array(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    ex = OrchPbsExecutor(tmp_path / "ex")
    ids = submit_all(ex, [request(tmp_path, f"q{i}", "sleep 20", shape="s") for i in range(3)])
    ex.cancel(ids)
    infos = wait(ex, ids)
    assert all(i.failure == FailureClass.CANCELLED for i in infos.values())


def test_find_by_name_repairs_an_interrupted_submit(pbs, tmp_path: Path) -> None:
    ex = OrchPbsExecutor(tmp_path / "ex")
    reqs = [request(tmp_path, "one", "true"), request(tmp_path, "b0", "true", shape="s"),
            request(tmp_path, "b1", "true", shape="s")]
    ids = submit_all(ex, reqs)
    fresh = OrchPbsExecutor(tmp_path / "ex")  # another orch process, same folder
    found = fresh.find_by_name([r.job_name for r in reqs] + ["orch-never-a1"])
    assert found == {r.job_name: jid for r, jid in zip(reqs, ids)}
    assert fresh.calls == {"qstat": 1}


def test_history_gone_and_invalid_json(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An odd variable value: the server prints invalid JSON (PBS_EMU_RAW_VARIABLES).
    ex = OrchPbsExecutor(tmp_path / "ex", {"qsub_args": ["-v", 'ODD=say "hi"']})
    ids = submit_all(ex, [request(tmp_path, "x0", "exit 0"), request(tmp_path, "x1", "exit 2")])
    pbs.wait_all()
    monkeypatch.setenv("PBS_EMU_RAW_VARIABLES", "1")
    before = len(pbs.calls("qstat"))
    infos = ex.query(ids)
    assert [(i.state, i.exit_code) for i in infos.values()] == [(JobState.COMPLETED, 0), (JobState.FAILED, 2)]
    assert len(pbs.calls("qstat")) - before == 3  # the batched call, then one per id
    # Job history expired: qstat no longer knows them; the wrapper's exit markers still tell.
    monkeypatch.setenv("PBS_EMU_HISTORY_S", "0")
    time.sleep(1.1)
    infos = ex.query(ids + ["424242.pbs01"])
    assert [(i.state, i.exit_code) for i in infos.values()][:2] == [(JobState.COMPLETED, 0), (JobState.FAILED, 2)]
    # The markers also tell where and how long (PBS's own record is gone).
    assert all(infos[i].node_list and infos[i].elapsed_s is not None and infos[i].started_at for i in ids)
    # "Unknown Job Id" for that id alone: not an end yet; orch's follow calls it lost after its grace.
    assert infos["424242.pbs01"].state == JobState.UNKNOWN and infos["424242.pbs01"].failure == FailureClass.LOST
    assert "error" not in infos["424242.pbs01"].extra


def test_a_server_dropping_operands_is_asked_one_at_a_time(pbs, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    monkeypatch.setenv("PBS_EMU_DROP_OPERANDS", "1")
    ex = OrchPbsExecutor(tmp_path / "ex")
    held, opened = gate(tmp_path)
    ids = submit_all(ex, [request(tmp_path, "first", held), request(tmp_path, "second", "true"),
                          request(tmp_path, "a0", "true", shape="s"), request(tmp_path, "a1", "true", shape="s")])
    infos = ex.query(ids)
    # Nothing is unknown: every job was asked for again on its own.
    assert all(i.state in (JobState.PENDING, JobState.RUNNING) for i in infos.values()), infos
    assert (tmp_path / "ex" / "qstat-one-operand").exists()
    opened.touch()
    # Another orch process on the same folder asks one operand per call from the start.
    before = len(pbs.calls("qstat"))
    fresh = OrchPbsExecutor(tmp_path / "ex")
    infos = wait(fresh, ids)
    assert all(i.state == JobState.COMPLETED for i in infos.values())
    assert all(len(c) == 1 + 5 + 1 for c in pbs.calls("qstat")[before:])


def test_a_subjob_deleted_before_it_ran_is_cancelled(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleted while queued after a sibling failed: PBS shows it X, substate 70, with the array's
    Exit_status (1); orch records it cancelled, with no start, no exit code."""
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    ex = OrchPbsExecutor(tmp_path / "ex")
    held, opened = gate(tmp_path)
    ids = submit_all(ex, [request(tmp_path, "s0", "exit 3", shape="s"), request(tmp_path, "s1", held, shape="s"),
                          request(tmp_path, "s2", "true", shape="s")])
    deadline = time.time() + 30
    while ex.query([ids[1]])[ids[1]].state != JobState.RUNNING and time.time() < deadline:
        time.sleep(0.1)
    queued = ex.query([ids[2]])[ids[2]]
    assert queued.state == JobState.PENDING and queued.started_at is None
    ex.cancel([ids[2]])
    infos = ex.query(ids)
    assert (infos[ids[0]].failure, infos[ids[0]].exit_code) == (FailureClass.FAILED, 3)
    gone = infos[ids[2]]
    assert (gone.state, gone.failure, gone.exit_code, gone.started_at) == (
        JobState.FAILED, FailureClass.CANCELLED, None, None)
    opened.touch()
    infos = wait(ex, ids)
    assert infos[ids[2]].failure == FailureClass.CANCELLED and infos[ids[1]].state == JobState.COMPLETED


def test_qsub_refusal_is_reported(pbs, tmp_path: Path) -> None:
    ex = OrchPbsExecutor(tmp_path / "ex", {"qsub_args": ["-J", "0-0"]})
    result = ex.submit([request(tmp_path, "bad", "true")])
    assert result.job_ids == (None,)
    assert "illegal -J value" in result.refused["orch-bad-a1"] and not result.uncertain and not result.deferred


def test_server_down_is_uncertain_and_queue_limit_defers(pbs, tmp_path: Path) -> None:
    (pbs.bin / "qsub").write_text("#!/bin/sh\necho 'qsub: cannot connect to server pbs01 (errno=111)' >&2\n"
                                  "exit 1\n")
    ex = OrchPbsExecutor(tmp_path / "ex")
    result = ex.submit([request(tmp_path, "down", "true")])
    assert result.job_ids == (None,)
    assert "cannot connect to server" in result.uncertain["orch-down-a1"] and not result.refused


def test_max_queued_jobs_defers_the_rest(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    ex = OrchPbsExecutor(tmp_path / "ex", {"max_queued_jobs": 3})
    held, _ = gate(tmp_path)  # never opened: the test cancels them
    first = submit_all(ex, [request(tmp_path, f"s{i}", held, shape="s") for i in range(2)])
    assert all(first) and ex.queued_count() == 2
    more = ex.submit([request(tmp_path, f"m{i}", "true") for i in range(3)])
    assert more.job_ids[0] is not None and more.job_ids[1:] == (None, None)
    assert set(more.deferred) == {"orch-m1-a1", "orch-m2-a1"} and "max_queued_jobs=3" in more.deferred["orch-m1-a1"]
    ex.cancel(first)


def test_submitit_plugin_runs_pickled_callables(pbs, tmp_path: Path) -> None:
    executor = submitit.AutoExecutor(tmp_path / "submitit", cluster="pbs")
    executor.update_parameters(timeout_min=2, name="orch-plugin-test")
    job = executor.submit(pow, 2, 10)
    assert job.job_id.endswith(".pbs01") and job.result() == 1024
    jobs = executor.map_array(pow, [2, 3, 4], [2, 2, 2])
    seq = jobs[0].job_id.split("[")[0]
    assert [j.job_id for j in jobs] == [f"{seq}[{i}].pbs01" for i in range(3)]
    assert [j.result() for j in jobs] == [4, 9, 16]
    deadline = time.time() + 30
    while jobs[0].get_info(mode="force").get("State") != "COMPLETED" and time.time() < deadline:
        time.sleep(0.2)  # the result is written before the job's process has exited
    assert jobs[0].state == "COMPLETED" and jobs[0].get_info(mode="cache")["NodeList"]
    qsub = next(c for c in pbs.calls("qsub") if "-J" in c)
    assert qsub[qsub.index("-J") + 1] == "0-2"
    submitted = (tmp_path / "submitit" / f"{seq}[].pbs01_submission.sh").read_text()  # one per array
    assert "export SUBMITIT_EXECUTOR=pbs" in submitted and "#PBS -N orch-plugin-test" in submitted


def test_submitit_plugin_reports_failures(pbs, tmp_path: Path) -> None:
    executor = PbsExecutor(tmp_path / "submitit")
    executor.update_parameters(timeout_min=1)
    job = executor.submit(int, "not a number")
    with pytest.raises(submitit.core.utils.FailedJobError, match="invalid literal"):
        job.result()

    def job_env() -> dict:
        env = submitit.JobEnvironment()
        return {"name": env.name(), "job_id": env.job_id, "nodes": env.num_nodes}

    got = executor.submit(job_env).result()
    assert got["name"] == "pbs" and got["job_id"].endswith(".pbs01") and got["nodes"] == 1


def test_cancel_stops_every_copy(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run submitted twice (a qsub that answered after orch gave up on it): cancelling the job orch
    recorded stops the copy too, subjob for subjob; other jobs are left alone."""
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    reqs = [request(tmp_path, "solo", "sleep 30"), request(tmp_path, "a0", "sleep 30", shape="s"),
            request(tmp_path, "a1", "sleep 30", shape="s")]
    ex = OrchPbsExecutor(tmp_path / "ex")
    recorded = submit_all(ex, reqs)
    copies = submit_all(OrchPbsExecutor(tmp_path / "ex"), reqs)  # the same attempts again
    other = submit_all(ex, [request(tmp_path, "other", "sleep 30")])
    ex.cancel([recorded[0], recorded[2]])  # the plain job and subjob 1 of the array
    stopped = [recorded[0], recorded[2], copies[0], copies[2]]
    infos = wait(ex, stopped)
    assert all(infos[j].failure == FailureClass.CANCELLED for j in stopped)
    alive = ex.query([recorded[1], copies[1], other[0]])
    assert all(not i.ended for i in alive.values()), alive  # subjob 0 and the other job: untouched
    ex.cancel(recorded + copies + other)
