"""The PBS emulator kept honest: its outputs have the shape of the recorded real ones."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.pbs.conftest import SAMPLES, gate


def sh(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=60)


def script(tmp_path: Path, body: str, name: str = "job.sh") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    return str(path)


def wait_state(jid: str, states: str, timeout: float = 30) -> dict:
    deadline = time.time() + timeout
    while True:
        out = sh("qstat", "-x", "-f", "-F", "json", jid)
        attrs = json.loads(out.stdout)["Jobs"][jid]
        if attrs["job_state"] in states or time.time() > deadline:
            return attrs
        time.sleep(0.1)


def sample_job(name: str) -> dict:
    return next(iter(json.loads((SAMPLES / name).read_text())["Jobs"].values()))


def test_ids_and_finished_job_document(pbs, tmp_path: Path) -> None:
    jid = sh("qsub", "-N", "running_job", "-l", "select=1:ncpus=1", "-l", "walltime=00:02:00",
             script(tmp_path, "echo out; echo err >&2"), check=True).stdout.strip()
    assert re.fullmatch(r"\d+\.pbs01", jid)
    attrs = wait_state(jid, "F")
    real = sample_job("qstat-xf-json-completed.json")
    # Every attribute the real server shows for a finished job, the emulator shows too.
    assert set(real) <= set(attrs), set(real) - set(attrs)
    assert (attrs["job_state"], attrs["Exit_status"], attrs["substate"]) == ("F", 0, 92)
    assert attrs["Resource_List"]["select"] == "1:ncpus=1" and attrs["Resource_List"]["walltime"] == "00:02:00"
    # Top-level document and its tab layout as the real one.
    text = sh("qstat", "-x", "-f", "-F", "json", jid).stdout
    assert text.startswith('{\n\t"timestamp":\t') and '\n\t"pbs_version":\t"23.06.06",' in text
    # Output spooled and copied to the default <name>.o<seq> in the submit directory at the end.
    seq = jid.split(".")[0]
    assert (Path.cwd() / f"running_job.o{seq}").read_text() == "out\n"
    assert (Path.cwd() / f"running_job.e{seq}").read_text() == "err\n"


def test_arrays(pbs, tmp_path: Path) -> None:
    jid = sh("qsub", "-N", "arr", "-J", "0-2", "-o", str(tmp_path / "o.^array_index^"),
             script(tmp_path, 'echo "$PBS_ARRAY_INDEX $PBS_JOBID"'), check=True).stdout.strip()
    assert re.fullmatch(r"\d+\[\]\.pbs01", jid)
    pbs.wait_all()
    seq = jid.split("[")[0]
    doc = json.loads(sh("qstat", "-x", "-t", "-f", "-F", "json", jid).stdout)["Jobs"]
    assert list(doc) == [jid, f"{seq}[0].pbs01", f"{seq}[1].pbs01", f"{seq}[2].pbs01"]
    real = json.loads((SAMPLES / "qstat-xtf-json-array-finished.json").read_text())["Jobs"]
    assert set(real["9[].pbs01"]) <= set(doc[jid]) and set(real["9[1].pbs01"]) <= set(doc[f"{seq}[1].pbs01"])
    assert doc[jid]["array"] == "True" and doc[jid]["array_indices_remaining"] == "-"
    assert [doc[f"{seq}[{i}].pbs01"]["array_index"] for i in range(3)] == [0, 1, 2]
    assert (tmp_path / "o.1").read_text() == f"1 {seq}[1].pbs01\n"
    # Without -t only the parent; a subjob can be asked for directly.
    assert list(json.loads(sh("qstat", "-x", "-f", "-F", "json", jid).stdout)["Jobs"]) == [jid]
    assert list(json.loads(sh("qstat", "-x", "-f", "-F", "json", f"{seq}[2]").stdout)["Jobs"]) == [f"{seq}[2].pbs01"]


def test_refusals(pbs, tmp_path: Path) -> None:
    job = script(tmp_path, "true")
    one = sh("qsub", "-J", "0-0", job)
    assert one.returncode != 0 and "illegal -J value" in one.stderr  # arrays need >= 2 entries
    quote = sh("qsub", "-N", 'a"b', job)
    assert quote.returncode != 0 and "illegal -N value" in quote.stderr


def test_unknown_and_finished_ids(pbs, tmp_path: Path) -> None:
    unknown = sh("qstat", "-x", "-f", "-F", "json", "99999.pbs01")
    assert unknown.returncode == 153
    assert unknown.stderr == (SAMPLES / "qstat-xf-json-unknown.stderr").read_text().split("rc=")[0]
    assert set(json.loads(unknown.stdout)) == set(json.loads((SAMPLES / "qstat-xf-json-unknown.stdout").read_text()))
    jid = sh("qsub", script(tmp_path, "true"), check=True).stdout.strip()
    wait_state(jid, "F")
    both = sh("qstat", "-x", "-f", "-F", "json", jid, "99999.pbs01")
    assert both.returncode == 153 and list(json.loads(both.stdout)["Jobs"]) == [jid]
    assert sh("qstat", "-f", "-F", "json", jid).returncode == 35  # finished: only with -x
    gone = sh("qdel", jid)
    assert gone.returncode == 35 and "Job has finished" in gone.stderr
    assert sh("qdel", "99999.pbs01").returncode == 153
    listing = sh("qstat", "-x").stdout.splitlines()
    assert listing[:2] == (SAMPLES / "qstat-x-plain.txt").read_text().splitlines()[:2]


def test_exit_codes_walltime_memory_and_qdel(pbs, tmp_path: Path) -> None:
    ids = {
        "exit3": sh("qsub", script(tmp_path, "exit 3", "a.sh"), check=True).stdout.strip(),
        "walltime": sh("qsub", "-l", "walltime=00:00:01", script(tmp_path, "sleep 30", "b.sh"),
                       check=True).stdout.strip(),
        "mem": sh("qsub", "-l", "select=1:ncpus=1:mem=20mb",
                  script(tmp_path, "python3 -c 'x = bytearray(200 * 2**20); import time; time.sleep(30)'", "c.sh"),
                  check=True).stdout.strip(),
        "signal": sh("qsub", script(tmp_path, "kill -SEGV $$", "d.sh"), check=True).stdout.strip(),
        "qdel_running": sh("qsub", script(tmp_path, "sleep 30", "e.sh"), check=True).stdout.strip(),
        "qdel_queued": sh("qsub", "-h", script(tmp_path, "true", "f.sh"), check=True).stdout.strip(),
    }
    wait_state(ids["qdel_running"], "R")
    assert sh("qdel", ids["qdel_running"], ids["qdel_queued"]).returncode == 0
    pbs.wait_all(timeout=60)
    status = {k: json.loads(sh("qstat", "-x", "-f", "-F", "json", v).stdout)["Jobs"][v] for k, v in ids.items()}
    assert status["exit3"]["Exit_status"] == 3 and status["exit3"]["substate"] == 93
    assert status["walltime"]["Exit_status"] == -29
    assert "exceeded resource walltime" in status["walltime"]["comment"]
    assert status["mem"]["Exit_status"] == -27
    assert status["signal"]["Exit_status"] == 256 + 11
    assert status["qdel_running"]["Exit_status"] in (271, 265)
    assert "Exit_status" not in status["qdel_queued"] and status["qdel_queued"]["substate"] == 91
    assert all(s["job_state"] == "F" for s in status.values())


def test_job_environment_is_pbs_not_the_submitters(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_SECRET_OF_SUBMITTER", "leak")
    out = tmp_path / "env.txt"
    jid = sh("qsub", script(tmp_path, f"env > {out}; pwd >> {out}"), check=True).stdout.strip()
    wait_state(jid, "F")
    env = out.read_text()
    assert "ORCH_SECRET_OF_SUBMITTER" not in env  # no qsub -V
    assert f"PBS_JOBID={jid}" in env and "PBS_NODEFILE=" in env and f"PBS_O_WORKDIR={Path.cwd()}" in env


def test_dropped_operands_mode(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PBS_EMU_DROP_OPERANDS=1: the main-branch qstat client (recorded in
    qstat-xtf-json-two-operands-head.txt): a JSON query of several operands answers rc 0 with the
    first operand's jobs only; text mode and a 23.06 client list them all."""
    a = sh("qsub", "-h", script(tmp_path, "true"), check=True).stdout.strip()
    b = sh("qsub", "-h", "-J", "0-1", script(tmp_path, "true", "b.sh"), check=True).stdout.strip()
    both = sh("qstat", "-x", "-t", "-f", "-F", "json", a, b)
    assert both.returncode == 0 and set(json.loads(both.stdout)["Jobs"]) >= {a, b}
    monkeypatch.setenv("PBS_EMU_DROP_OPERANDS", "1")
    dropped = sh("qstat", "-x", "-t", "-f", "-F", "json", a, b)
    assert dropped.returncode == 0 and list(json.loads(dropped.stdout)["Jobs"]) == [a] and not dropped.stderr
    assert list(json.loads(sh("qstat", "-x", "-t", "-f", "-F", "json", b).stdout)["Jobs"])[0] == b
    text = sh("qstat", "-x", a, b).stdout
    assert a in text and b in text
    sh("qdel", a, b, check=True)


def keys_of(name: str, jid: str) -> set[str]:
    return set(json.loads((SAMPLES / name).read_text())["Jobs"][jid])


def test_array_subjobs_that_have_not_run_show_the_array(pbs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded array of 38[]: queued subjobs carry the array's stime, deleted ones substate 70
    and the parent's current Exit_status; finished, they are F 91 with the parent's value."""
    monkeypatch.setenv("PBS_EMU_SLOTS", "1")
    held, opened = gate(tmp_path)  # [1] holds the one slot until the test has looked
    body = f'case "$PBS_ARRAY_INDEX" in 0) exit 3;; 1) {held};; *) true;; esac'
    jid = sh("qsub", "-J", "0-3", script(tmp_path, body), check=True).stdout.strip()
    seq = jid.split("[")[0]
    sub = {i: f"{seq}[{i}].pbs01" for i in range(4)}

    def doc() -> dict:
        return json.loads(sh("qstat", "-x", "-t", "-f", "-F", "json", jid).stdout)["Jobs"]

    deadline = time.time() + 30
    while doc()[sub[1]]["job_state"] != "R" and time.time() < deadline:
        time.sleep(0.1)
    sh("qdel", sub[2], check=True)  # queued, after [0] ended with 3
    now = doc()
    parent, queued, deleted = now[jid], now[sub[3]], now[sub[2]]
    assert (parent["job_state"], parent["substate"], parent["Exit_status"]) == ("B", 70, 1)
    assert (deleted["job_state"], deleted["substate"], deleted["Exit_status"]) == ("X", 70, 1)
    assert deleted["comment"] == "Subjob finished" and "exec_host" not in deleted
    assert queued["job_state"] == "Q" and queued["stime"] == parent["stime"] and queued["Exit_status"] == 1
    recorded = "qstat-xtf-json-array-queued-subjob-deleted-after-sibling.json"
    assert set(queued) == keys_of(recorded, "38[3].pbs01") and set(deleted) == keys_of(recorded, "38[4].pbs01")
    assert keys_of(recorded, "38[0].pbs01") <= set(now[sub[0]])
    opened.touch()
    pbs.wait_all()
    done = doc()
    assert (done[jid]["job_state"], done[jid]["substate"]) == ("F", 91)
    assert (done[sub[2]]["job_state"], done[sub[2]]["substate"]) == ("F", 91)
    assert done[sub[2]]["Exit_status"] == done[jid]["Exit_status"] == 0  # [3] ended last, with 0
    assert (done[sub[0]]["substate"], done[sub[0]]["Exit_status"]) == (93, 3)
    assert done[sub[3]]["array_index"] == 3 and done[sub[3]]["exec_host"]  # ran: its own attributes


def test_qdel_of_a_running_job_is_substate_91(pbs, tmp_path: Path) -> None:
    jid = sh("qsub", script(tmp_path, "sleep 30"), check=True).stdout.strip()
    wait_state(jid, "R")
    sh("qdel", jid, check=True)
    attrs = wait_state(jid, "F")
    assert (attrs["substate"], attrs["Exit_status"]) in ((91, 271), (91, 265))
    assert "terminated by" in attrs["comment"]


def test_server_down(pbs, tmp_path: Path) -> None:
    jid = sh("qsub", script(tmp_path, "sleep 1; echo done"), check=True).stdout.strip()
    (pbs.home / "down").touch()
    for command in (["qstat", "-x", "-f", "-F", "json", jid], ["qsub", script(tmp_path, "true", "b.sh")],
                    ["qdel", jid]):
        cp = sh(*command)
        assert cp.returncode != 0 and "cannot connect to server pbs01 (errno=15010)" in cp.stderr
    time.sleep(2)
    (pbs.home / "down").unlink()
    assert wait_state(jid, "F")["Exit_status"] == 0  # the job went on while the server was down
