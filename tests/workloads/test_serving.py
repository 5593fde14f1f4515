"""llm_serving against a real server: orch's CPU server (workloads/serving/cpu_server.py) started
by the workload on this machine, random tiny weights written at start, no download; the same
launch, health wait, load generator and figures a GPU site's vLLM server goes through.

The figures are checked against a hand computation from the raw per-request records, and the
three ways a server fails (taken port, health check never passing, death under load) each end
with their own failure class, the finished requests' figures kept.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests import warm_torch
from tests.workloads.workload_helpers import REPO, _env, load_valid
from workloads.serving import figures, launch, loadgen, spec

QUICK = ["--model", "tiny", "--input-len", "16", "--output-len", "6", "--warmup", "1"]


def _serve(tmp_path: Path, args: list[str], timeout: float = 180,
           extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "workloads.llm_serving", *args, "--output", str(tmp_path / "metrics.json")]
    return subprocess.run(cmd, cwd=REPO, env={**_env(), **(extra_env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]


def _pct(values: list[float], q: int) -> float:
    """numpy's linear percentile by another route: statistics' inclusive quantiles."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _failure(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "serving_failure.json").read_text())


def test_figures_match_a_hand_computation_from_the_records(tmp_path: Path) -> None:
    proc = _serve(tmp_path, [*QUICK, "--arrival", "constant", "--rate", "10", "--num-requests", "10",
                             "--slo", "ttft=0.5,tpot=0.05"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = load_valid(tmp_path / "metrics.json")["metrics"]
    records = _records(tmp_path)
    assert sorted(r["index"] for r in records) == list(range(10))  # in the order they ended
    assert all(r["ok"] and r["output_tokens"] == 6 and len(r["chunk_s"]) == 6 for r in records)
    # Constant arrivals: one every 0.1 s as scheduled, each sent at (or just after) its time.
    assert [r["scheduled_s"] for r in sorted(records, key=lambda r: r["index"])] == pytest.approx(
        [i / 10 for i in range(10)])
    ttft = [r["chunk_s"][0] for r in records]
    itl = [b - a for r in records for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]
    tpot = [(r["latency_s"] - r["chunk_s"][0]) / 5 for r in records]
    e2e = [r["latency_s"] for r in records]
    for name, values in (("ttft", ttft), ("itl", itl), ("tpot", tpot), ("e2e", e2e)):
        assert m[f"{name}_count"] == len(values)
        for q in (50, 90, 99):
            assert m[f"{name}_p{q}_s"] == pytest.approx(_pct(values, q), rel=1e-12), (name, q)
    assert m["ttft_count"] == 10 and m["itl_count"] == 50 and m["tpot_count"] == 10
    assert m["tpot_s"] == pytest.approx(statistics.fmean(tpot), rel=1e-12)
    assert m["ttft_mean_s"] == pytest.approx(statistics.fmean(ttft), rel=1e-12)
    duration = m["duration_s"]
    last_end = max(r["sent_s"] + r["latency_s"] for r in records)
    assert last_end <= duration < last_end + 0.5
    assert m["output_tokens_per_s"] == pytest.approx(60 / duration, rel=1e-12)
    assert m["requests_per_s"] == pytest.approx(10 / duration, rel=1e-12)
    meeting = sum(1 for t, p in zip(ttft, tpot) if t <= 0.5 and p <= 0.05)
    assert m["goodput_requests_per_s"] == pytest.approx(meeting / duration, rel=1e-12)
    assert m["goodput_fraction"] == pytest.approx(meeting / 10)
    assert m["slo_met"] == int(_pct(ttft, 99) <= 0.5 and _pct(tpot, 99) <= 0.05)
    assert m["slo_ttft_s"] == 0.5 and m["slo_tpot_s"] == 0.05 and m["request_rate"] == 10
    assert m["requests_completed"] == 10 and m["requests_failed"] == 0
    # The server was stopped with the run.
    pid = int((tmp_path / "server.pid").read_text())
    assert not _alive(pid)


def test_closed_loop_concurrency(tmp_path: Path) -> None:
    proc = _serve(tmp_path, [*QUICK, "--arrival", "concurrency", "--concurrency", "3", "--num-requests", "6",
                             "--slo", "mlperf-llama2-70b-interactive"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = load_valid(tmp_path / "metrics.json")["metrics"]
    assert m["concurrency"] == 3 and m["request_rate"] is None and m["e2e_count"] == 6
    assert (m["slo_ttft_s"], m["slo_tpot_s"]) == (0.45, 0.04)
    records = _records(tmp_path)
    # The server serves one request at a time: with 3 clients, later requests queue, so some
    # request's TTFT includes another's whole generation.
    assert max(r["chunk_s"][0] for r in records) > min(r["latency_s"] for r in records)


def test_length_distributions_follow_their_spec() -> None:
    """fixed, uniform and normal lengths: seeded, within their bounds, of the asked mean."""
    fixed = spec.length_dist("input", "fixed", 40)
    assert fixed.sample(5, seed=1) == [40] * 5 and (fixed.low, fixed.high) == (40, 40)
    uniform = spec.length_dist("input", "uniform", 999, low=10, high=50)
    drawn = uniform.sample(20_000, seed=7)
    assert drawn == uniform.sample(20_000, seed=7) and drawn != uniform.sample(20_000, seed=8)
    assert min(drawn) == 10 and max(drawn) == 50  # both ends reached, none past them
    assert statistics.fmean(drawn) == pytest.approx(30, abs=0.3) and uniform.mean == 30  # 999 is not used
    assert len(set(drawn)) == 41
    normal = spec.length_dist("output", "normal", 100, stdev=15)
    assert (normal.low, normal.high) == (1, 199)  # clipped symmetrically by default
    drawn = normal.sample(20_000, seed=3)
    assert statistics.fmean(drawn) == pytest.approx(100, abs=0.5)
    assert statistics.stdev(drawn) == pytest.approx(15, rel=0.05)
    clipped = spec.length_dist("output", "normal", 100, low=90, high=105, stdev=30).sample(5_000, seed=3)
    assert min(clipped) == 90 and max(clipped) == 105
    assert clipped.count(105) > clipped.count(104) * 3  # the tail past 105 piles up at the bound


@pytest.mark.parametrize("params, message", [
    ({"input_dist": "zipf"}, "input_dist 'zipf': expected one of fixed, uniform, normal"),
    ({"input_dist": "uniform", "input_min": 10}, "input_dist uniform needs 1 <= input_min <= input_max"),
    ({"output_dist": "uniform", "output_min": 9, "output_max": 3}, "output_min=9, output_max=3"),
    ({"output_dist": "normal"}, "output_dist normal needs a positive output_stdev"),
    ({"output_dist": "normal", "output_stdev": 5, "output_len": 10, "output_max": 8},
     "1 <= output_min <= output_len <= output_max"),
    ({"input_len": 0}, "input_len must be a positive number of tokens"),
    ({"input_min": "ten", "input_dist": "uniform"}, "input_min 'ten' is not a whole number"),
    ({"input_dist": "uniform", "input_min": 10, "input_max": 1000, "output_len": 64},
     "the longest request (1064 tokens"),
])
def test_bad_length_distributions_are_refused_at_plan_time(params: dict[str, Any], message: str) -> None:
    from workloads import registry

    refusal = registry.get("llm_serving").refusal
    assert refusal is not None
    assert message in (refusal({"rate": 1, "model": "tiny", **params}) or ""), refusal({"rate": 1, **params})


def test_per_request_lengths_in_the_records_and_the_figures(tmp_path: Path) -> None:
    """Drawn lengths reach the server per request and are kept in each record; TPOT and tokens/s
    use each request's own output length (checked by hand from the records)."""
    args = ["--model", "tiny", "--warmup", "1", "--arrival", "concurrency", "--concurrency", "2",
            "--num-requests", "12", "--seed", "5", "--input-dist", "uniform", "--input-min", "4", "--input-max", "40",
            "--output-len", "6", "--output-dist", "normal", "--output-stdev", "3", "--output-min", "2",
            "--output-max", "10", "--slo", "none"]
    proc = _serve(tmp_path, args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = load_valid(tmp_path / "metrics.json")
    records = sorted(_records(tmp_path), key=lambda r: r["index"])
    expected_in = spec.length_dist("input", "uniform", 6, low=4, high=40).sample(12, 20_000 + 5)
    expected_out = spec.length_dist("output", "normal", 6, low=2, high=10, stdev=3).sample(12, 30_000 + 5)
    assert [r["input_tokens"] for r in records] == expected_in
    assert [r["output_len"] for r in records] == expected_out
    assert len(set(expected_out)) > 2 and len(set(expected_in)) > 2  # the draw did vary
    assert all(r["ok"] and r["output_tokens"] == r["output_len"] == len(r["chunk_s"]) for r in records)
    tpot = [(r["latency_s"] - r["chunk_s"][0]) / (r["output_tokens"] - 1) for r in records]
    figures_ = m["metrics"]
    assert figures_["tpot_p50_s"] == pytest.approx(_pct(tpot, 50), rel=1e-12)
    assert figures_["tpot_s"] == pytest.approx(statistics.fmean(tpot), rel=1e-12)
    assert figures_["itl_count"] == sum(r["output_len"] - 1 for r in records)
    duration = figures_["duration_s"]
    assert figures_["output_tokens_per_s"] == pytest.approx(sum(expected_out) / duration, rel=1e-12)
    assert figures_["input_tokens_per_s"] == pytest.approx(sum(expected_in) / duration, rel=1e-12)
    assert figures_["input_len"] == 22 and figures_["output_len"] == 6  # the distributions' means
    assert m["serving"]["lengths"]["output"] == {"kind": "normal", "mean": 6, "low": 2, "high": 10, "stdev": 3.0}


def test_port_already_taken(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = _serve(tmp_path, [*QUICK, "--rate", "5", "--num-requests", "2", "--port", str(port)])
    assert proc.returncode == launch.EXIT_CODES["port_in_use"] == 5, proc.stderr[-2000:]
    failure = _failure(tmp_path)
    assert failure["failure_class"] == "port_in_use" and str(port) in failure["reason"]
    assert "port_in_use" in proc.stderr
    assert not (tmp_path / "metrics.json").exists()


def test_builtin_server_reports_a_taken_port_itself() -> None:
    """The race the pre-check cannot close (taken between check and start): the server's own
    message, which the health wait turns into port_in_use."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "workloads.serving.cpu_server", "--port", str(port)],
                              cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 98 and "already in use" in proc.stderr.lower()


def test_health_check_never_passes(tmp_path: Path) -> None:
    # The real server needs over a second to import torch and build the model: 0.3 s is too short.
    # So it starts cold: forked from the tests' warm torch (tests/warm_torch.py) it was healthy
    # within 0.3 s once, on a busy machine.
    proc = _serve(tmp_path, [*QUICK, "--rate", "5", "--num-requests", "2", "--health-timeout-s", "0.3"],
                  extra_env={warm_torch.COLD_ENV: "1"})
    assert proc.returncode == launch.EXIT_CODES["server_unhealthy"] == 3, proc.stderr[-2000:]
    failure = _failure(tmp_path)
    assert failure["failure_class"] == "server_unhealthy" and "within 0.3 s" in failure["reason"]
    assert not _alive(int((tmp_path / "server.pid").read_text())), "the unhealthy server was left running"


def test_endpoint_that_never_answers(tmp_path: Path) -> None:
    port = launch.free_port()
    proc = _serve(tmp_path, [*QUICK, "--backend", "endpoint", "--endpoint", f"http://127.0.0.1:{port}",
                             "--rate", "5", "--num-requests", "2", "--health-timeout-s", "1"])
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert _failure(tmp_path)["failure_class"] == "server_unhealthy"


def test_server_dies_mid_run_and_finished_requests_are_kept(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "workloads.llm_serving", *QUICK, "--arrival", "constant", "--rate", "4",
           "--num-requests", "40", "--output", str(tmp_path / "metrics.json")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        records = tmp_path / "requests.jsonl"
        deadline = time.monotonic() + 120
        while not (records.exists() and len(records.read_text().splitlines()) >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "the load never started"
            time.sleep(0.05)
        os.kill(int((tmp_path / "server.pid").read_text()), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == launch.EXIT_CODES["server_died"] == 4, stderr[-2000:]
    failure = _failure(tmp_path)
    assert failure["failure_class"] == "server_died"
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    finished = [r for r in kept if r["ok"]]
    assert len(finished) >= 3 and len(kept) < 40
    # The failure file's figures are those of every finished request, recomputable from the records.
    partial = failure["figures"]
    assert partial["requests_completed"] == len(finished) and partial["ttft_count"] == len(finished)
    assert partial["ttft_p50_s"] == pytest.approx(_pct([r["chunk_s"][0] for r in finished], 50), rel=1e-12)
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_no_server_outlives_its_workload(tmp_path: Path, how: signal.Signals) -> None:
    """A cancel or walltime ends the workload (SIGTERM, then SIGKILL): its server goes too."""
    cmd = [sys.executable, "-m", "workloads.llm_serving", *QUICK, "--arrival", "constant", "--rate", "2",
           "--num-requests", "100", "--output", str(tmp_path / "metrics.json")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        records = tmp_path / "requests.jsonl"
        deadline = time.monotonic() + 120
        while not (records.exists() and records.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, "the load never started"
            time.sleep(0.05)
        server = int((tmp_path / "server.pid").read_text())
        proc.send_signal(how)
        proc.wait(60)
        deadline = time.monotonic() + 15
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), f"the server outlived its workload ({how.name})"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_gpu_server_commands_are_rendered() -> None:
    """vLLM and SGLang cannot run here (no GPU, not installed): their command lines, as text."""
    def command(backend: str, extra: str = "") -> list[str]:
        return launch.server_command(backend, host="0.0.0.0", port=8123, model="llama2-7b", model_dir="/tmp/m", tp=2,
                                     dtype="bfloat16", max_len=1152, seed=3, extra=extra)

    vllm = command("vllm", "--gpu-memory-utilization 0.9")
    assert vllm[:3] == ["vllm", "serve", "/tmp/m"]
    joined = " ".join(vllm)
    for part in ("--port 8123", "--load-format dummy", "--tensor-parallel-size 2", "--dtype bfloat16",
                 "--max-model-len 1152", "--served-model-name llama2-7b", "--gpu-memory-utilization 0.9"):
        assert part in joined
    sglang = " ".join(command("sglang"))
    assert "-m sglang.launch_server --model-path /tmp/m" in sglang and "--tp 2" in sglang
    with pytest.raises(ValueError):
        command("endpoint")


def test_gaudi_and_tgi_server_commands_are_rendered() -> None:
    """TGI and Intel Gaudi's vLLM cannot run here (no Gaudi, not installed): their command lines and
    environments, as text; every word stays one argv element (no shell), odd characters and all."""
    odd_dir = "/tmp/model dir/$(touch x)'q"

    def command(backend: str, device: str, tp: int = 8, dtype: str = "bfloat16") -> list[str]:
        return launch.server_command(backend, host="0.0.0.0", port=8123, model="llama2-7b", model_dir=odd_dir,
                                     tp=tp, dtype=dtype, max_len=1152, seed=3, device=device, max_input=1024,
                                     extra="--max-num-seqs 16")

    gaudi = command("vllm", "hpu")
    assert gaudi[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert gaudi[gaudi.index("--model") + 1] == odd_dir
    assert shlex.split(shlex.join(gaudi)) == gaudi
    joined = " ".join(gaudi)
    for part in ("--tensor-parallel-size 8", "--block-size 128", "--dtype bfloat16", "--load-format dummy",
                 "--port 8123", "--served-model-name llama2-7b", "--max-model-len 1152", "--max-num-seqs 16"):
        assert part in joined, part
    assert command("vllm", "cuda")[:2] == ["vllm", "serve"]  # CUDA and ROCm keep `vllm serve`
    tgi = command("tgi", "hpu")
    assert tgi[0] == "text-generation-launcher" and tgi[tgi.index("--model-id") + 1] == odd_dir
    joined = " ".join(tgi)
    for part in ("--num-shard 8", "--sharded true", "--port 8123", "--hostname 0.0.0.0", "--max-input-tokens 1024",
                 "--max-total-tokens 1152", "--dtype bfloat16"):
        assert part in joined, part
    one = command("tgi", "cuda", tp=1, dtype="float32")
    assert "--sharded" not in one and "--dtype" not in one and one[one.index("--num-shard") + 1] == "1"
    assert launch.server_env("vllm", "hpu", 8) == {"PT_HPU_ENABLE_LAZY_COLLECTIVES": "true"}
    assert launch.server_env("tgi", "hpu", 2) == {"PT_HPU_ENABLE_LAZY_COLLECTIVES": "true"}
    assert launch.server_env("vllm", "hpu", 1) == {} and launch.server_env("vllm", "cuda", 8) == {}


def test_slo_presets_and_arrivals() -> None:
    assert figures.parse_slo("mlperf-llama2-70b-server") == {"ttft": 2.0, "tpot": 0.2}
    assert figures.parse_slo("mlperf-llama2-70b-interactive") == {"ttft": 0.45, "tpot": 0.04}
    assert figures.parse_slo("ttft=1.5") == {"ttft": 1.5} and figures.parse_slo("none") == {}
    for bad in ("ttft=fast", "latency=1", "ttft=-1"):
        with pytest.raises(ValueError):
            figures.parse_slo(bad)
    offsets = loadgen.arrival_offsets("poisson", 50.0, 4000, seed=1)
    gaps = [b - a for a, b in zip(offsets, offsets[1:])]
    assert statistics.fmean(gaps) == pytest.approx(1 / 50, rel=0.05)  # exponential, mean 1/rate
    assert statistics.stdev(gaps) == pytest.approx(1 / 50, rel=0.1)  # an exponential's sd is its mean
    assert loadgen.arrival_offsets("poisson", 50.0, 10, seed=1) == offsets[:10]  # seeded
    assert loadgen.arrival_offsets("constant", 4.0, 3, seed=0) == [0.0, 0.25, 0.5]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill 0: read its state.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False




def test_plan_time_refusals() -> None:
    """What `orch plan` skips with the reason instead of submitting a run that can only fail."""
    from workloads import registry

    refusal = registry.get("llm_serving").refusal
    assert refusal is not None
    assert refusal({"slo": "mlperf-llama2-70b-server", "rate": 4}) is None
    assert "endpoint" in (refusal({"backend": "endpoint", "rate": 1}) or "")
    assert "positive rate" in (refusal({"arrival": "poisson", "rate": 0}) or "")
    assert refusal({"arrival": "concurrency", "rate": 0, "concurrency": 4}) is None
    assert "expected none" in (refusal({"slo": "fast", "rate": 1}) or "")
