"""The PBS executor's pure parts against outputs recorded from a real OpenPBS 23.06 server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Set
from pathlib import Path

import pytest

from orchestrator.run.executors.base import FailureClass, JobState
from orchestrator.run.executors.pbs import (
    QSTAT_QUERY,
    classify_exit,
    exec_hosts,
    job_info,
    normalize_job_id,
    parse_directives,
    parse_job_id,
    parse_mem_mb,
    parse_qstat_json,
    parse_qsub_output,
    qstat_jobs,
    qstat_operands,
    salvage_qstat_json,
)
from tests.pbs.conftest import SAMPLES


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def jobs_of(name: str) -> dict:
    return parse_qstat_json(sample(name))


# ------------------------------------------------------------------------------ ids


def test_qsub_output_gives_the_job_id() -> None:
    assert parse_qsub_output(sample("qsub-stdout.txt")) == "6.pbs01"
    assert parse_qsub_output(sample("qsub-array-stdout.txt")) == "9[].pbs01"
    assert parse_qsub_output(b"6.pbs01\n") == "6.pbs01"
    with pytest.raises(Exception, match="could not find a PBS job id"):
        parse_qsub_output("qsub: Unknown queue\n")


@pytest.mark.parametrize("text, seq, is_array, index, server", [
    ("6.pbs01", 6, False, None, "pbs01"),
    ("9[].pbs01", 9, True, None, "pbs01"),
    ("9[2].pbs01", 9, True, 2, "pbs01"),
    ("12345.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov", 12345, False, None,
     "polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"),
    (" 7 ", 7, False, None, None),
])
def test_job_ids_parse(text: str, seq: int, is_array: bool, index: int | None, server: str | None) -> None:
    parsed = parse_job_id(text)
    assert (parsed.seq, parsed.is_array, parsed.index, parsed.server) == (seq, is_array, index, server)
    assert str(parsed) == text.strip()


def test_job_id_normalisation_and_arrays() -> None:
    assert normalize_job_id(" 6 ", "pbs01") == "6.pbs01"
    assert normalize_job_id("9[1]", "pbs01") == "9[1].pbs01"
    parent = parse_job_id("9[].pbs01")
    assert str(parent.subjob(2)) == "9[2].pbs01" and str(parse_job_id("9[2].pbs01").parent) == "9[].pbs01"
    # One operand per plain job and per array (-t lists the subjobs).
    assert qstat_operands(["9[0].pbs01", "9[1].pbs01", "6.pbs01", "9[2].pbs01"]) == ["9[].pbs01", "6.pbs01"]


# ------------------------------------------------------------------------------ recorded samples


def test_running_job() -> None:
    jobs = jobs_of("qstat-f-json-running.json")
    info = job_info("6.pbs01", jobs["6.pbs01"])
    assert info.state == JobState.RUNNING and info.failure is None and not info.ended
    assert info.node_list == "pbs01" and info.started_at and info.started_at.startswith("2026-11-22T08:19:19")


def test_completed_job() -> None:
    info = job_info("6.pbs01", jobs_of("qstat-xf-json-completed.json")["6.pbs01"])
    assert (info.state, info.failure, info.exit_code) == (JobState.COMPLETED, None, 0)
    assert info.elapsed_s == 20 and info.max_rss_mb == pytest.approx(6332 / 1024)
    assert info.finished_at and info.finished_at.startswith("2026-11-22T08:19:40")
    assert info.extra["substate"] == 92


def test_script_exit_code() -> None:
    info = job_info("7.pbs01", jobs_of("qstat-xf-json-exit3.json")["7.pbs01"])
    assert (info.state, info.failure, info.exit_code) == (JobState.FAILED, FailureClass.FAILED, 3)
    assert info.extra["substate"] == 93


def test_walltime_exceeded() -> None:
    info = job_info("8.pbs01", jobs_of("qstat-xf-json-walltime-exceeded.json")["8.pbs01"])
    assert (info.state, info.failure) == (JobState.FAILED, FailureClass.TIMEOUT)
    assert "-29" in (info.reason or "")


def test_deleted_while_queued() -> None:
    info = job_info("10.pbs01", jobs_of("qstat-xf-json-qdel-queued.json")["10.pbs01"])
    assert (info.state, info.failure, info.exit_code) == (JobState.FAILED, FailureClass.CANCELLED, None)
    assert info.node_list is None and info.extra["substate"] == 91
    # Never ran (no exec_host, substate 91): an Exit_status shown with it is not its own.
    shown = with_changes("qstat-xf-json-qdel-queued.json", "10.pbs01", Exit_status=0)
    assert job_info("10.pbs01", shown).failure == FailureClass.CANCELLED


def test_array_queued_and_finished() -> None:
    running = jobs_of("qstat-t-f-json-array-running.json")
    assert set(running) == {"9[].pbs01", "9[0].pbs01", "9[1].pbs01", "9[2].pbs01"}
    for jid, attrs in running.items():
        info = job_info(jid, attrs)
        assert info.state == JobState.PENDING and info.reason == "Not Running: Not enough free nodes available"
    finished = jobs_of("qstat-xtf-json-array-finished.json")
    for i in range(3):
        info = job_info(f"9[{i}].pbs01", finished[f"9[{i}].pbs01"])
        assert (info.state, info.exit_code) == (JobState.COMPLETED, 0)
        assert info.extra["array_index"] == i and info.extra["array_id"] == "9[].pbs01"


def test_unknown_id_document_has_no_jobs() -> None:
    assert parse_qstat_json(sample("qstat-xf-json-unknown.stdout")) == {}
    assert "Unknown Job Id 99999.pbs01" in sample("qstat-xf-json-unknown.stderr")


# ------------------------------------------------------------------------------ states and exit codes


def with_changes(name: str, jid: str, **changes) -> dict:
    attrs = json.loads(json.dumps(jobs_of(name)[jid]))
    for key, value in changes.items():
        if value is None:
            attrs.pop(key, None)
        else:
            attrs[key] = value
    return attrs


@pytest.mark.parametrize("letter, state", [
    *[(c, JobState.PENDING) for c in "QHWTMSU"],
    *[(c, JobState.RUNNING) for c in "RBE"],
])
def test_every_waiting_and_running_state(letter: str, state: JobState) -> None:
    attrs = with_changes("qstat-f-json-running.json", "6.pbs01", job_state=letter)
    info = job_info("6.pbs01", attrs)
    assert info.state == state and not info.ended


@pytest.mark.parametrize("exit_status, state, failure, code", [
    (0, JobState.COMPLETED, None, 0),
    (1, JobState.FAILED, FailureClass.FAILED, 1),
    (255, JobState.FAILED, FailureClass.FAILED, 255),
    (-29, JobState.FAILED, FailureClass.TIMEOUT, None),     # walltime
    (-28, JobState.FAILED, FailureClass.TIMEOUT, None),     # cput
    (-27, JobState.FAILED, FailureClass.OUT_OF_MEMORY, None),  # mem
    (-26, JobState.FAILED, FailureClass.OUT_OF_MEMORY, None),  # vmem
    (271, JobState.FAILED, FailureClass.CANCELLED, 143),    # qdel of a running job (256+SIGTERM)
    (265, JobState.FAILED, FailureClass.CANCELLED, 137),    # 256+SIGKILL after the kill delay
    (267, JobState.FAILED, FailureClass.FAILED, 139),       # 256+SIGSEGV: killed by another signal
    (262, JobState.FAILED, FailureClass.FAILED, 134),       # 256+SIGABRT
    (-11, JobState.FAILED, FailureClass.NODE_FAILURE, None),
    (-20, JobState.FAILED, FailureClass.NODE_FAILURE, None),
    (-12, JobState.FAILED, FailureClass.PREEMPTED, None),
    (-1, JobState.FAILED, FailureClass.LAUNCH_ERROR, None),
    (-10, JobState.FAILED, FailureClass.LAUNCH_ERROR, None),
    (None, JobState.FAILED, FailureClass.CANCELLED, None),  # deleted while queued
])
def test_exit_status_classes(exit_status, state, failure, code) -> None:
    assert classify_exit(exit_status)[:3] == (state, failure, code)
    for letter in "FX":  # X: a finished subjob while its array still runs
        attrs = with_changes("qstat-xf-json-completed.json", "6.pbs01", job_state=letter, Exit_status=exit_status)
        info = job_info("6.pbs01", attrs)
        assert (info.state, info.failure, info.exit_code) == (state, failure, code)
        assert info.ended


def test_odd_values_do_not_raise() -> None:
    info = job_info("1.x", {"job_state": "?", "Exit_status": "n/a", "exec_host": "", "resources_used": "x"})
    assert info.state == JobState.UNKNOWN
    assert exec_hosts("nodeA/0*2+nodeB/1+nodeA/3") == "nodeA,nodeB"
    assert parse_mem_mb("10gb") == 10240 and parse_mem_mb("512") == pytest.approx(512 / 2**20)
    assert parse_mem_mb("lots") is None


# ------------------------------------------------------------------------------ invalid JSON


def broken_sample() -> str:
    """The completed sample with an unescaped quote in a Variable_List value (what some PBS
    versions print for odd environment values)."""
    return sample("qstat-xf-json-completed.json").replace(
        '"PBS_O_SYSTEM":\t"Linux"', '"PBS_O_SYSTEM":\t"Li"nux"')


def test_invalid_json_is_salvaged() -> None:
    text = broken_sample()
    with pytest.raises(ValueError):
        parse_qstat_json(text)
    jobs = salvage_qstat_json(text)
    info = job_info("6.pbs01", jobs["6.pbs01"])
    assert (info.state, info.exit_code, info.node_list, info.elapsed_s) == (JobState.COMPLETED, 0, "pbs01", 20)


class FakeQstat:
    """qstat answers by id from the samples; records each call."""

    def __init__(self, docs: dict[str, str], unknown: Set[str] = frozenset(), broken_batch: bool = False) -> None:
        self.docs, self.unknown, self.broken_batch = docs, unknown, broken_batch
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(args)
        assert args[:len(QSTAT_QUERY) + 1] == ["qstat", *QSTAT_QUERY]
        ids = args[len(QSTAT_QUERY) + 1:]
        jobs: dict = {}
        stderr = ""
        rc = 0
        for jid in ids:
            if jid in self.unknown:
                stderr += f"qstat: Unknown Job Id {jid}\n"
                rc = 153
            else:
                jobs.update(parse_qstat_json(self.docs[jid]))
        doc = {"timestamp": 1, "pbs_version": "23.06.06", "pbs_server": "pbs01"}
        if jobs:
            doc["Jobs"] = jobs
        text = json.dumps(doc, indent="\t", separators=(",", ":\t"))
        if self.broken_batch and len(ids) > 1:
            text = text.replace('"Linux"', '"Li"nux"', 1)
        return subprocess.CompletedProcess(args, rc, text, stderr)


DOCS = {"6.pbs01": sample("qstat-xf-json-completed.json"), "7.pbs01": sample("qstat-xf-json-exit3.json"),
        "9[].pbs01": sample("qstat-xtf-json-array-finished.json")}


def test_one_batched_qstat_answers_everything() -> None:
    fake = FakeQstat(DOCS)
    got = qstat_jobs(["6.pbs01", "7.pbs01", "9[].pbs01"], fake)
    assert len(fake.calls) == 1 and got.calls == 1
    assert {"6.pbs01", "7.pbs01", "9[].pbs01", "9[0].pbs01", "9[2].pbs01"} <= set(got.jobs)


def test_unknown_ids_fall_back_one_at_a_time() -> None:
    fake = FakeQstat(DOCS, unknown={"99999.pbs01"})
    got = qstat_jobs(["6.pbs01", "99999.pbs01", "7.pbs01"], fake)
    # The batched call (rc 153) still carried 6 and 7: only the unknown one is asked again.
    assert [c[-1] for c in fake.calls] == ["7.pbs01", "99999.pbs01"]
    assert got.unknown == {"99999.pbs01"} and {"6.pbs01", "7.pbs01"} <= set(got.jobs)


def test_invalid_batched_json_falls_back_one_at_a_time() -> None:
    fake = FakeQstat(DOCS, broken_batch=True)
    got = qstat_jobs(["6.pbs01", "7.pbs01"], fake)
    assert len(fake.calls) == 3 and {"6.pbs01", "7.pbs01"} <= set(got.jobs) and not got.errors


def test_directives_of_a_rendered_script() -> None:
    script = ("#!/bin/bash\n# comment\n#PBS -N orch-abc\n#PBS -l select=2:system=polaris\n#PBS -o /x/out\n"
              "#PBS -e /x/err\n#PBS -q prod\n#PBS -A proj\n#PBS -J 0-3\nexec >>x\n#PBS -l late=1\n")
    assert parse_directives(script) == ["-l select=2:system=polaris", "-q prod", "-A proj"]


# ------------------------------------------------------------------------------ subjobs that have not run


def test_queued_subjobs_do_not_take_the_arrays_start() -> None:
    jobs = jobs_of("qstat-t-f-json-array-running-queued-subjobs.json")
    running = [job_info(f"38[{i}].pbs01", jobs[f"38[{i}].pbs01"]) for i in (0, 1)]
    queued = [job_info(f"38[{i}].pbs01", jobs[f"38[{i}].pbs01"]) for i in (2, 3, 4, 5)]
    assert all(i.state == JobState.RUNNING and i.started_at and i.node_list == "pbs01" for i in running)
    # Their stime is the array's: they have not started.
    assert all(i.state == JobState.PENDING and i.started_at is None for i in queued)


def test_queued_subjob_deleted_after_a_sibling_ended() -> None:
    jobs = jobs_of("qstat-xtf-json-array-queued-subjob-deleted-after-sibling.json")
    deleted = job_info("38[4].pbs01", jobs["38[4].pbs01"])
    # X, substate 70, Exit_status 1: the array's value, not its own. It never ran.
    assert (deleted.state, deleted.failure, deleted.exit_code) == (JobState.FAILED, FailureClass.CANCELLED, None)
    assert deleted.started_at is None and deleted.node_list is None and deleted.extra["never_ran"]
    assert "the array's" in (deleted.reason or "")
    killed = job_info("38[0].pbs01", jobs["38[0].pbs01"])  # deleted while running: its own 271
    assert (killed.state, killed.failure, killed.exit_code) == (JobState.FAILED, FailureClass.CANCELLED, 143)
    assert killed.node_list == "pbs01" and killed.elapsed_s == 13
    for i in (3, 5):  # still queued, showing the array's Exit_status and stime
        info = job_info(f"38[{i}].pbs01", jobs[f"38[{i}].pbs01"])
        assert info.state == JobState.PENDING and info.started_at is None and info.exit_code is None


def test_finished_array_with_a_subjob_deleted_before_it_ran() -> None:
    jobs = jobs_of("qstat-xtf-json-array-finished-with-deletions.json")
    infos = {i: job_info(f"38[{i}].pbs01", jobs[f"38[{i}].pbs01"]) for i in range(6)}
    # [4]: F, substate 91, Exit_status 0 (the array's): cancelled, not completed.
    assert (infos[4].state, infos[4].failure, infos[4].exit_code) == (JobState.FAILED, FailureClass.CANCELLED, None)
    assert infos[0].failure == FailureClass.CANCELLED and infos[0].exit_code == 143
    for i in (1, 2, 3, 5):
        assert (infos[i].state, infos[i].exit_code) == (JobState.COMPLETED, 0) and infos[i].elapsed_s
    assert infos[2].started_at != infos[1].started_at  # each its own start once it ran


# ------------------------------------------------------------------------------ dropped operands


def recorded_json(name: str) -> str:
    """The JSON document of a capture that has a note before it and ``rc=N`` after it."""
    text = sample(name)
    return text[text.index("{"):text.rindex("}") + 1]


def test_two_operand_captures() -> None:
    full = parse_qstat_json(recorded_json("qstat-xtf-json-two-operands-2306.txt"))
    head = parse_qstat_json(recorded_json("qstat-xtf-json-two-operands-head.txt"))
    assert "39.pbs01" in full and "38[].pbs01" in full and "38[5].pbs01" in full
    assert list(head) == ["39.pbs01"]  # rc 0, the second operand silently dropped
    assert job_info("38[4].pbs01", full["38[4].pbs01"]).extra.get("never_ran")


class DroppingQstat(FakeQstat):
    """The qstat client of OpenPBS's main branch: rc 0 and only the first operand's jobs."""

    def __call__(self, args: list[str]) -> subprocess.CompletedProcess:
        ids = args[len(QSTAT_QUERY) + 1:]
        answer = super().__call__([*args[:len(QSTAT_QUERY) + 1], *ids[:1]])
        self.calls[-1] = args  # what was asked
        return answer


def test_dropped_operands_are_asked_again_one_at_a_time() -> None:
    fake = DroppingQstat(DOCS)
    got = qstat_jobs(["6.pbs01", "7.pbs01", "9[].pbs01"], fake)
    assert [c[len(QSTAT_QUERY) + 1:] for c in fake.calls] == [
        ["6.pbs01", "7.pbs01", "9[].pbs01"], ["7.pbs01"], ["9[].pbs01"]]
    assert {"6.pbs01", "7.pbs01", "9[].pbs01", "9[2].pbs01"} <= set(got.jobs)
    assert got.dropped == ["7.pbs01", "9[].pbs01"] and not got.errors and not got.unknown
    # Known to drop: one operand per call from the start, nothing batched.
    again = DroppingQstat(DOCS)
    got = qstat_jobs(["6.pbs01", "7.pbs01"], again, one_at_a_time=True)
    assert [len(c) for c in again.calls] == [len(QSTAT_QUERY) + 2] * 2 and not got.dropped


def test_absence_from_a_successful_answer_is_never_unknown() -> None:
    class Silent(FakeQstat):  # rc 0, no jobs (qstat -x on a server without job history, say)
        def __call__(self, args: list[str]) -> subprocess.CompletedProcess:
            self.calls.append(args)
            return subprocess.CompletedProcess(args, 0, '{"timestamp": 1, "pbs_version": "23.06.06"}', "")

    got = qstat_jobs(["6.pbs01", "7.pbs01"], Silent(DOCS))
    assert not got.unknown and set(got.errors) == {"6.pbs01", "7.pbs01"}
    # "Unknown Job Id" in a batched answer names no job for sure: asked alone before it counts.
    fake = FakeQstat(DOCS, unknown={"99999.pbs01"})
    got = qstat_jobs(["99999.pbs01", "6.pbs01"], fake)
    assert fake.calls[-1][len(QSTAT_QUERY) + 1:] == ["99999.pbs01"] and got.unknown == {"99999.pbs01"}


def test_samples_are_the_recorded_ones() -> None:
    """tests/pbs/samples is a copy of shared/reference/pbs-samples (project fixtures)."""
    ref = Path("/work/shared/reference/pbs-samples")
    if not ref.is_dir():
        pytest.skip("reference folder not present")
    for path in ref.iterdir():
        assert (SAMPLES / path.name).read_text() == path.read_text(), path.name
