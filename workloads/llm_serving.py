"""LLM serving: an OpenAI-compatible server on the allocation, driven by a load generator.

The job starts the server (``--backend builtin|vllm|sglang|tgi``, or uses ``--endpoint URL`` with
``--backend endpoint``), waits for ``/health`` to answer 200 (``--health-timeout-s``), sends
``--warmup`` untimed requests one by one, then ``--num-requests`` streamed requests by the
arrival process (``--arrival poisson|constant`` at ``--rate`` per second, or ``concurrency``
with ``--concurrency`` closed-loop clients), stops the server and writes the figures of
workloads/serving/figures.py (TTFT, ITL, TPOT, end-to-end p50/p90/p99 with sample counts,
output tokens/s, requests/s, goodput under ``--slo``). One grid value of ``rate`` or
``concurrency`` is one run: a sweep over them is the latency-throughput curve. Prompt and output
lengths are fixed or drawn per request (``--input-dist``/``--output-dist`` uniform or normal,
seeded: workloads/serving/spec.py LengthDist); each request asks for its own output length.

The server is one process for all the run's devices (tensor parallel ``--server-tp``, which a plan
sets to the run's devices: workloads/registry.py ``devices_param``), started once by this one
workload process, never one per rank.

Every request's record (send time, each chunk's arrival, tokens, error) is appended to
``requests.jsonl`` beside ``--output`` as the request ends, so the figures can be recomputed
and a server that dies mid-run loses none of the finished requests.

A server that cannot be used ends the run with its own failure class, written to
``serving_failure.json`` beside ``--output`` with the figures of the requests that finished,
and exit code 3 (``server_unhealthy``), 4 (``server_died``) or 5 (``port_in_use``); orch's
follow stage records that class on the attempt.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from workloads.harness import Refused, Session, run_workload
from workloads.harness.metrics import write_atomic
from workloads.serving import figures as serving_figures
from workloads.serving import guidellm_run, launch, loadgen
from workloads.serving.spec import REQUEST_STYLES, LengthDist, lengths_from

FAILURE_FILE = "serving_failure.json"
RECORDS_FILE = "requests.jsonl"


def _run_dir(session: Session) -> Path:
    return Path(session.args.output).resolve().parent if session.args.output else Path.cwd()


def _lengths(args: Any) -> tuple[LengthDist, LengthDist]:
    """The input and output length distributions of the command line; Refused names a bad one."""
    try:
        return lengths_from(vars(args), "input"), lengths_from(vars(args), "output")
    except ValueError as exc:
        raise Refused(str(exc)) from exc


def _check(args: Any) -> dict[str, float]:
    if args.backend not in launch.BACKENDS:
        raise Refused(f"--backend {args.backend!r}: expected one of {', '.join(launch.BACKENDS)}")
    if args.backend == "endpoint" and not args.endpoint:
        raise Refused("--backend endpoint needs --endpoint URL (the server's base URL, e.g. http://node:8000)")
    if args.arrival not in loadgen.ARRIVALS:
        raise Refused(f"--arrival {args.arrival!r}: expected one of {', '.join(loadgen.ARRIVALS)}")
    if args.arrival != "concurrency" and not args.rate > 0:
        raise Refused(f"--arrival {args.arrival} needs a positive --rate (requests per second)")
    if args.arrival == "concurrency" and args.concurrency < 1:
        raise Refused("--arrival concurrency needs --concurrency of at least 1")
    if args.num_requests < 1:
        raise Refused("--num-requests must be positive")
    if args.server_tp < 1:
        raise Refused("--server-tp must be at least 1")
    try:
        return serving_figures.parse_slo(args.slo)
    except ValueError as exc:
        raise Refused(str(exc)) from exc


def body(session: Session) -> None:
    args = session.args
    slo = _check(args)
    if session.world_size > 1:
        # One process starts the server and drives it; the server spreads over the devices itself
        # (--server-tp). Several launched copies would each start a server on the same devices.
        raise Refused(f"llm_serving runs as one process (devices: 1), not {session.world_size}: the server's own "
                      "tensor parallelism is --server-tp")
    from workloads.models.llama_configs import SIZES

    size = SIZES[args.model]
    input_dist, output_dist = _lengths(args)
    if input_dist.high + output_dist.high > size.max_seq:
        raise Refused(f"{input_dist.high} + {output_dist.high} tokens (the longest input and output) exceed "
                      f"{args.model}'s {size.max_seq} positions")
    run_dir = _run_dir(session)
    run_dir.mkdir(parents=True, exist_ok=True)
    records_path = run_dir / RECORDS_FILE
    records_path.unlink(missing_ok=True)  # a retried attempt starts its own records
    (run_dir / FAILURE_FILE).unlink(missing_ok=True)
    dtype = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[session.precision.name]

    server: launch.Server
    model_dir = ""
    if args.backend == "endpoint":
        server = launch.Server(args.endpoint.rstrip("/"), None, None)
    else:
        host = args.host
        port = args.port or launch.free_port(host)
        if args.backend == "transformers" and not os.access(launch.serving_python(), os.X_OK):
            raise Refused(f"--backend transformers needs the serving environment: {launch.serving_python()} is not "
                          "there (run scripts/setup_serving.sh, or set ORCH_SERVING_PYTHON to a Python with "
                          "transformers[serving])")
        model_dir = "" if args.backend == "builtin" else launch.write_model_dir(
            launch.llama_config(dataclasses.asdict(size), dtype))
        argv = launch.server_command(args.backend, host=host, port=port, model=args.model, model_dir=model_dir,
                                     tp=args.server_tp, dtype=dtype, max_len=input_dist.high + output_dist.high,
                                     seed=args.seed, extra=args.server_args, device=session.device.type,
                                     max_input=input_dist.high)
        env = launch.server_env(args.backend, session.device.type, args.server_tp)
        session.log("starting the server: " + " ".join([*(f"{k}={v}" for k, v in env.items()), *argv]))
        try:
            server = launch.start(argv, host=host, port=port, log_path=run_dir / "server.log", env=env)
        except launch.ServingFailure as exc:
            _fail(session, run_dir, exc, [], 0.0, slo)
        (run_dir / "server.pid").write_text(str(server.process.pid if server.process else ""))
    records: list[dict[str, Any]] = []
    try:
        try:
            ready_s = launch.wait_healthy(server, launch.health_url(args.backend, server.base_url),
                                          args.health_timeout_s)
        except launch.ServingFailure as exc:
            _fail(session, run_dir, exc, [], 0.0, slo)
        session.log(f"server healthy after {ready_s:.1f} s at {server.base_url}")
        url = server.base_url + "/v1/completions"
        # transformers serve answers only to the name it was started with: its model directory.
        served = model_dir if args.backend == "transformers" else args.model
        style = REQUEST_STYLES.get(args.backend, "token_ids")
        vocab = size.vocab_size
        # Seeded draws, one stream each: the timed requests' lengths and prompts do not depend on
        # the warm-up count; the warm-up requests are of the mean lengths.
        input_lens = input_dist.sample(args.num_requests, 20_000 + args.seed)
        output_lens = output_dist.sample(args.num_requests, 30_000 + args.seed)
        prompt_ids = loadgen.prompts(input_lens, vocab, args.seed)
        if args.warmup:
            warm = loadgen.run_load(url, model=served, arrival="concurrency", rate=0.0, concurrency=1, style=style,
                                    prompt_ids=loadgen.prompts([input_dist.mean] * args.warmup, vocab, args.seed + 1),
                                    output_len=output_dist.mean, timeout_s=args.request_timeout_s)
            if warm.server_gone or not server.alive():
                _fail(session, run_dir, launch.ServingFailure(
                    "server_died", f"the server went away during warm-up: {warm.server_gone or server.log_tail()}"),
                    [], 0.0, slo)

        if args.loadgen == "guidellm":
            result, tool = _guidellm_load(session, args, server.base_url, served, input_dist, output_dist, run_dir)
        else:
            with open(records_path, "a") as out:
                def keep(record: loadgen.Record) -> None:
                    # Written and flushed as each request ends: a crash later loses none of them.
                    out.write(record.as_json() + "\n")
                    out.flush()

                result = loadgen.run_load(url, model=served, arrival=args.arrival, rate=args.rate, style=style,
                                          concurrency=args.concurrency, prompt_ids=prompt_ids,
                                          output_len=output_lens, seed=args.seed,
                                          timeout_s=args.request_timeout_s, on_record=keep)
            tool = {"name": "orch"}
        records = [dataclasses.asdict(r) for r in result.records]
        if result.server_gone or not server.alive():
            why = result.server_gone or f"the server exited with {server.process.poll() if server.process else '?'}"
            _fail(session, run_dir, launch.ServingFailure("server_died", f"the server went away under load: {why}"),
                  records, result.duration_s, slo)
    finally:
        server.stop()
    figures = serving_figures.compute(records, result.duration_s, slo)
    figures.update({"server_ready_s": ready_s, "num_requests": args.num_requests, "input_len": input_dist.mean,
                    "output_len": output_dist.mean,
                    "request_rate": args.rate if args.arrival != "concurrency" else None,
                    "concurrency": args.concurrency if args.arrival == "concurrency" else None,
                    "timed_time_s": result.duration_s})
    if figures["requests_completed"] == 0:
        raise Refused(f"no request succeeded; first error: {records[0]['error'] if records else 'none sent'}")
    session.finish(figures, [], warmup_steps=args.warmup,
                   extra={"serving": {"backend": args.backend, "arrival": args.arrival, "slo": slo,
                                      "base_url": server.base_url, "records": RECORDS_FILE, "server_tp": args.server_tp,
                                      "loadgen": tool,
                                      "lengths": {"input": dataclasses.asdict(input_dist),
                                                  "output": dataclasses.asdict(output_dist)}}})


def _guidellm_load(session: Session, args: Any, base_url: str, served: str, input_dist: LengthDist,
                   output_dist: LengthDist, run_dir: Path) -> tuple[loadgen.LoadResult, dict[str, str]]:
    """The timed load by GuideLLM, from its own environment; its per-request statistics become
    requests.jsonl's records. Refused when it is not installed or fails (its log is guidellm.log)."""
    if input_dist.kind != "fixed" or output_dist.kind != "fixed":
        raise Refused("--loadgen guidellm takes fixed lengths only (input_dist and output_dist fixed)")
    if not os.access(guidellm_run.executable(), os.X_OK):
        raise Refused(f"--loadgen guidellm: {guidellm_run.executable()} is not there (run scripts/setup_serving.sh, "
                      "or set ORCH_GUIDELLM to a guidellm 0.8 executable)")
    report = run_dir / "guidellm.json"
    argv = guidellm_run.command(base_url=base_url, model=served, arrival=args.arrival, rate=args.rate,
                                concurrency=args.concurrency, num_requests=args.num_requests,
                                input_len=input_dist.mean, output_len=output_dist.mean, seed=args.seed,
                                output_path=report)
    session.log("load by GuideLLM: " + " ".join(argv))
    with open(run_dir / "guidellm.log", "wb") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"}).returncode
    if code != 0 or not report.exists():
        raise Refused(f"GuideLLM exited with {code}; its log is {run_dir / 'guidellm.log'}")
    records, duration, version = guidellm_run.parse(report)
    (run_dir / RECORDS_FILE).write_text("".join(r.as_json() + "\n" for r in records))
    return loadgen.LoadResult(records, duration), {"name": "guidellm", "version": version}


def _fail(session: Session, run_dir: Path, exc: launch.ServingFailure, records: list[dict[str, Any]],
          duration_s: float, slo: dict[str, float]) -> NoReturn:
    """Write the failure class with the finished requests' figures, then exit with its code."""
    finished = serving_figures.compute(records, duration_s, slo) if records else {}
    write_atomic(str(run_dir / FAILURE_FILE), {"failure_class": exc.failure_class, "reason": exc.reason,
                                               "records": RECORDS_FILE, "figures": finished})
    print(f"llm_serving: {exc.failure_class}: {exc.reason}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    raise SystemExit(launch.EXIT_CODES[exc.failure_class])


def _terminated(signum: int, frame: Any) -> None:
    # A cancel or a walltime's SIGTERM: leave through the finally blocks, which stop the server.
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, _terminated)
    return run_workload("llm_serving", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
