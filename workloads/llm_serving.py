"""LLM serving: an OpenAI-compatible server on the allocation, driven by a load generator.

The job starts the server (``--backend builtin|vllm|sglang``, or uses ``--endpoint URL`` with
``--backend endpoint``), waits for ``/health`` to answer 200 (``--health-timeout-s``), sends
``--warmup`` untimed requests one by one, then ``--num-requests`` streamed requests by the
arrival process (``--arrival poisson|constant`` at ``--rate`` per second, or ``concurrency``
with ``--concurrency`` closed-loop clients), stops the server and writes the figures of
workloads/serving/figures.py (TTFT, ITL, TPOT, end-to-end p50/p90/p99 with sample counts,
output tokens/s, requests/s, goodput under ``--slo``). One grid value of ``rate`` or
``concurrency`` is one run: a sweep over them is the latency-throughput curve.

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
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from workloads.harness import Refused, Session, run_workload
from workloads.harness.metrics import write_atomic
from workloads.serving import figures as serving_figures
from workloads.serving import launch, loadgen

FAILURE_FILE = "serving_failure.json"
RECORDS_FILE = "requests.jsonl"


def _run_dir(session: Session) -> Path:
    return Path(session.args.output).resolve().parent if session.args.output else Path.cwd()


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
    if min(args.num_requests, args.input_len, args.output_len) < 1:
        raise Refused("--num-requests, --input-len and --output-len must be positive")
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
    if args.input_len + args.output_len > size.max_seq:
        raise Refused(f"{args.input_len} + {args.output_len} tokens exceed {args.model}'s {size.max_seq} positions")
    run_dir = _run_dir(session)
    run_dir.mkdir(parents=True, exist_ok=True)
    records_path = run_dir / RECORDS_FILE
    records_path.unlink(missing_ok=True)  # a retried attempt starts its own records
    (run_dir / FAILURE_FILE).unlink(missing_ok=True)
    dtype = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[session.precision.name]

    server: launch.Server
    if args.backend == "endpoint":
        server = launch.Server(args.endpoint.rstrip("/"), None, None)
    else:
        host = args.host
        port = args.port or launch.free_port(host)
        model_dir = "" if args.backend == "builtin" else launch.write_model_dir(
            launch.llama_config(dataclasses.asdict(size), dtype))
        argv = launch.server_command(args.backend, host=host, port=port, model=args.model, model_dir=model_dir,
                                     tp=args.server_tp, dtype=dtype, max_len=args.input_len + args.output_len,
                                     seed=args.seed, extra=args.server_args)
        session.log("starting the server: " + " ".join(argv))
        try:
            server = launch.start(argv, host=host, port=port, log_path=run_dir / "server.log")
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
        vocab = size.vocab_size
        prompt_ids = loadgen.prompts(args.warmup + args.num_requests, args.input_len, vocab, args.seed)
        if args.warmup:
            warm = loadgen.run_load(url, model=args.model, arrival="concurrency", rate=0.0, concurrency=1,
                                    prompt_ids=prompt_ids[:args.warmup], output_len=args.output_len,
                                    timeout_s=args.request_timeout_s)
            if warm.server_gone or not server.alive():
                _fail(session, run_dir, launch.ServingFailure(
                    "server_died", f"the server went away during warm-up: {warm.server_gone or server.log_tail()}"),
                    [], 0.0, slo)

        with open(records_path, "a") as out:
            def keep(record: loadgen.Record) -> None:
                # Written and flushed as each request ends: a crash later loses none of them.
                out.write(record.as_json() + "\n")
                out.flush()

            result = loadgen.run_load(url, model=args.model, arrival=args.arrival, rate=args.rate,
                                      concurrency=args.concurrency, prompt_ids=prompt_ids[args.warmup:],
                                      output_len=args.output_len, seed=args.seed,
                                      timeout_s=args.request_timeout_s, on_record=keep)
        records = [dataclasses.asdict(r) for r in result.records]
        if result.server_gone or not server.alive():
            why = result.server_gone or f"the server exited with {server.process.poll() if server.process else '?'}"
            _fail(session, run_dir, launch.ServingFailure("server_died", f"the server went away under load: {why}"),
                  records, result.duration_s, slo)
    finally:
        server.stop()
    figures = serving_figures.compute(records, result.duration_s, slo)
    figures.update({"server_ready_s": ready_s, "num_requests": args.num_requests, "input_len": args.input_len,
                    "output_len": args.output_len, "request_rate": args.rate if args.arrival != "concurrency" else None,
                    "concurrency": args.concurrency if args.arrival == "concurrency" else None,
                    "timed_time_s": result.duration_s})
    if figures["requests_completed"] == 0:
        raise Refused(f"no request succeeded; first error: {records[0]['error'] if records else 'none sent'}")
    session.finish(figures, [], warmup_steps=args.warmup,
                   extra={"serving": {"backend": args.backend, "arrival": args.arrival, "slo": slo,
                                      "base_url": server.base_url, "records": RECORDS_FILE}})


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
