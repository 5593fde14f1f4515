"""A small OpenAI-compatible completions server over orch's Llama-style engine, on the CPU.

It is the ``builtin`` backend of ``llm_serving``: a real server process on a real port, so the
load generator, the health wait and the fault handling are exercised exactly as against vLLM,
on a machine without a GPU. Random weights (speed does not depend on them); prompts are lists
of token ids (as the OpenAI API allows); every request generates exactly ``max_tokens`` tokens
(``ignore_eos`` is implied: the model has no end-of-sequence token).

Routes: ``GET /health`` (200 once the model is built), ``GET /v1/models``,
``POST /v1/completions`` with ``stream: true`` (server-sent events, one token per event, then a
usage event and ``data: [DONE]``) or without (one JSON body).

Requests are served one at a time (one lock around the engine): this is no batching engine, so
queueing shows up in TTFT under load, which is what a latency-throughput curve should show.

    python -m workloads.serving.cpu_server --port 8000 --model tiny
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence

EXIT_PORT_IN_USE = 98  # errno EADDRINUSE on Linux: the launcher recognises it


class Engine:
    """Greedy generation of one request at a time with a KV cache."""

    def __init__(self, model_name: str, seed: int, threads: int, dtype: str = "float32") -> None:
        import torch

        from workloads.models.llama import SIZES, Llama

        if threads > 0:
            torch.set_num_threads(threads)
        self.torch = torch
        self.cfg = SIZES[model_name]
        torch.manual_seed(seed)
        self.model = Llama(self.cfg, tp=1).to(getattr(torch, dtype)).eval()
        self.model.allocate(1, self.cfg.max_seq)
        self.lock = threading.Lock()
        self.name = model_name

    def generate(self, prompt: list[int], max_tokens: int):  # -> Iterator[int]
        torch = self.torch
        if len(prompt) + max_tokens > self.cfg.max_seq:
            raise ValueError(f"{len(prompt)} + {max_tokens} tokens exceed the model's {self.cfg.max_seq} positions")
        ids = torch.tensor([[t % self.cfg.vocab_size for t in prompt]], dtype=torch.long)
        with self.lock, torch.inference_mode():
            token = self.model(ids, 0).argmax(-1, keepdim=True)
            yield int(token.item())
            for position in range(len(prompt), len(prompt) + max_tokens - 1):
                token = self.model(token, position).argmax(-1, keepdim=True)
                yield int(token.item())


def _prompt_ids(prompt: Any) -> list[int]:
    """Token ids from an OpenAI prompt: a list of ints, or text (one id per UTF-8 byte)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt) and prompt:
        return list(prompt)
    if isinstance(prompt, str) and prompt:
        return list(prompt.encode())
    raise ValueError("prompt: expected a non-empty list of token ids or a non-empty string")


def make_handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Each token is a small write: without TCP_NODELAY, Nagle's algorithm holds it until the
            # client's (delayed) ACK of the last one, and tokens arrive in bunches (as uvicorn, vLLM's
            # server, the builtin server sends each write at once).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass  # one line per request would flood the run's log

        def _json(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": engine.name, "object": "model"}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                prompt = _prompt_ids(body.get("prompt"))
                max_tokens = int(body.get("max_tokens") or 16)
                if max_tokens < 1:
                    raise ValueError("max_tokens must be at least 1")
                tokens = engine.generate(prompt, max_tokens)
                first = next(tokens)  # errors of the engine before the 200 is sent
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                self._json(400, {"error": {"message": str(exc)}})
                return
            rid = f"cmpl-{time.monotonic_ns()}"
            if not body.get("stream"):
                out = [first, *tokens]
                self._json(200, {"id": rid, "object": "text_completion", "model": engine.name,
                                 "choices": [{"index": 0, "text": " ".join(map(str, out)), "finish_reason": "length"}],
                                 "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(out)}})
                return
            # Streamed without a length: the connection's end marks the body's end.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            count = 0
            for token in _chain(first, tokens):
                count += 1
                event = {"id": rid, "object": "text_completion", "model": engine.name,
                         "choices": [{"index": 0, "text": f" {token}", "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()  # each token leaves when it is made: TTFT and ITL are real
            usage = {"id": rid, "object": "text_completion", "model": engine.name, "choices": [],
                     "usage": {"prompt_tokens": len(prompt), "completion_tokens": count}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def _chain(first: int, rest: Any):  # -> Iterator[int]
    yield first
    yield from rest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.serving.cpu_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="tiny", help="Llama-style size (workloads/models/llama_configs.py)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    args = parser.parse_args(argv)
    # Bind first, before building the model: a taken port is reported at once, not after start-up.
    try:
        server = ThreadingHTTPServer((args.host, args.port), BaseHTTPRequestHandler)
    except OSError as exc:
        print(f"cpu_server: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr, flush=True)
        return EXIT_PORT_IN_USE if exc.errno == 98 else 1
    server.daemon_threads = True
    try:
        from workloads.models.llama_configs import SIZES
        if args.model not in SIZES:
            print(f"cpu_server: error: unknown model {args.model!r} (known: {', '.join(SIZES)})", file=sys.stderr)
            return 2
        engine = Engine(args.model, args.seed, args.threads, args.dtype)
        server.RequestHandlerClass = make_handler(engine)
        print(f"cpu_server: serving {args.model} on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
