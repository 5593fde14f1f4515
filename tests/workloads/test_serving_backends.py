"""The pieces of issue 49's third-party serving that need no server: how requests are written for
`transformers serve`, how GuideLLM is called, and how its first/last-token records are counted.
(The servers themselves: tests/e2e/test_serving_transformers.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.serving import figures, guidellm_run, launch, loadgen


def test_text_requests_carry_only_openai_fields_and_one_word_per_token() -> None:
    body = loadgen._request_body("text", "/models/tiny", [5, 0, 17], 4)
    assert body["prompt"] == "t5 t0 t17" and body["max_tokens"] == 4
    assert "ignore_eos" not in body and "min_tokens" not in body  # transformers serve refuses unknown fields
    vllm = loadgen._request_body("token_ids", "tiny", [5, 0, 17], 4)
    assert vllm["prompt"] == [5, 0, 17] and vllm["ignore_eos"] is True and vllm["min_tokens"] == 4


def test_transformers_backend_runs_hf_server_under_the_serving_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_SERVING_PYTHON", "/opt/serving/bin/python")
    argv = launch.server_command("transformers", host="127.0.0.1", port=8123, model="tiny", model_dir="/tmp/m",
                                 tp=1, dtype="float32", max_len=64, seed=3, extra="--log-level info")
    assert argv[0] == "/opt/serving/bin/python" and Path(argv[1]).name == "hf_server.py"
    assert argv[2:] == ["/tmp/m", "--host", "127.0.0.1", "--port", "8123", "--seed", "3", "--dtype", "float32",
                        "--log-level", "info"]


def test_guidellm_command_maps_orch_arrivals_to_its_profiles(tmp_path: Path) -> None:
    def command(arrival: str) -> list[str]:
        return guidellm_run.command(base_url="http://h:1", model="/m", arrival=arrival, rate=2.5, concurrency=3,
                                    num_requests=7, input_len=32, output_len=8, seed=4,
                                    output_path=tmp_path / "g.json")

    poisson = command("poisson")
    assert poisson[poisson.index("--profile") + 1] == "kind=poisson,rate=2.5"
    assert poisson[poisson.index("--constraint") + 1] == "kind=max_requests,count=7"
    assert poisson[poisson.index("--data") + 1] == "kind=synthetic_text,prompt_tokens=32,output_tokens=8"
    closed = command("concurrency")
    assert closed[closed.index("--profile") + 1] == "kind=concurrent,streams=3"


def test_first_last_records_count_one_mean_gap_each_as_guidellm_does() -> None:
    every = {"ok": True, "chunk_s": [0.1, 0.2, 0.4, 0.7], "latency_s": 0.7, "output_tokens": 4,
             "input_tokens": 8, "chunks": "all"}
    ends = {**every, "chunk_s": [0.1, 0.7], "chunks": "first_last"}
    pooled = figures.compute([every], 1.0, {})
    assert pooled["itl_count"] == 3 and pooled["itl_p50_s"] == pytest.approx(0.2)
    mean = figures.compute([ends], 1.0, {})
    assert mean["itl_count"] == 1 and mean["itl_p50_s"] == pytest.approx(0.2)
    # TTFT, TPOT and e2e need only the first and last times: both records give the same.
    for name in ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s", "output_tokens_per_s"):
        assert mean[name] == pytest.approx(pooled[name])


def test_guidellm_with_drawn_lengths_is_refused_at_plan_time() -> None:
    from workloads.registry import _serving_refusal

    params = {"loadgen": "guidellm", "rate": 2, "input_len": 32, "output_len": 8}
    assert _serving_refusal(params) is None
    why = _serving_refusal({**params, "output_dist": "uniform", "output_min": 4, "output_max": 12})
    assert why is not None and "guidellm" in why and "fixed" in why
