"""orch's own load generator for OpenAI-compatible completion endpoints (no torch, stdlib only).

Why not GuideLLM or AIPerf (the issue prefers a kept generator): both pull large dependency
trees (GuideLLM: httpx, transformers, datasets, pydantic-settings ...; AIPerf: ZMQ, uvloop,
transformers, a multi-process service stack) into ``.venv`` and onto every compute node's
Python, and pin versions that fight the sites' own torch stacks. What orch needs from them
is small: open-loop arrivals, streamed completions timed per chunk, one record per request.
This module does that with asyncio streams; its figures follow their definitions (and
``vllm bench serve``'s): see ``figures.py``. GuideLLM itself can drive a run instead
(``--loadgen guidellm``), from an environment of its own: workloads/serving/guidellm_run.py.

Arrivals (the field's three):
- ``poisson``: open loop, exponential gaps of mean 1/rate (seeded), as ``vllm bench serve
  --request-rate R`` and GuideLLM's ``poisson`` profile;
- ``constant``: open loop, one request every 1/rate seconds (GuideLLM's ``constant``);
- ``concurrency``: closed loop, ``concurrency`` clients each sending its next request when its
  last one ends (GuideLLM's ``concurrent``, AIPerf's ``--concurrency``).

Every request streams (``stream: true``) and asks for exactly its own output length (``ignore_eos``,
``min_tokens``; lengths drawn by workloads/serving/spec.py's LengthDist, kept in the record as
``output_len``, the tokens received as ``output_tokens``); the time of each received chunk is kept, relative to the
request's send time, so TTFT, ITL and TPOT can be recomputed from the records alone.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

from workloads.serving.hf_server import word
from workloads.serving.spec import ARRIVALS

__all__ = ["ARRIVALS", "LoadResult", "Record", "ServerGone", "arrival_offsets", "prompts", "run_load"]


@dataclass
class Record:
    """One request as the client saw it; times in seconds on the run's monotonic clock
    (``sent_s`` from the start of the load, ``chunk_s`` from ``sent_s``)."""

    index: int
    scheduled_s: float  # when the arrival process wanted it sent
    sent_s: float
    input_tokens: int
    output_len: int = 0  # the output tokens asked for (max_tokens = min_tokens)
    ok: bool = False
    latency_s: float | None = None  # send to last byte
    chunk_s: list[float] = field(default_factory=list)  # each content chunk's arrival
    output_tokens: int = 0  # the server's usage figure, else the number of content chunks
    error: str | None = None
    # "all": chunk_s holds every content chunk's arrival; "first_last": only the first and last
    # token's (a tool that keeps no more, such as GuideLLM: workloads/serving/guidellm_run.py).
    chunks: str = "all"

    def as_json(self) -> str:
        return json.dumps(asdict(self), allow_nan=False)


class ServerGone(Exception):
    """The connection was refused or reset: the server is no longer there."""


def arrival_offsets(arrival: str, rate: float, count: int, seed: int) -> list[float]:
    """Send times, from the start, of ``count`` open-loop requests at ``rate`` per second."""
    if rate <= 0:
        raise ValueError(f"arrival {arrival}: rate must be positive (got {rate})")
    if arrival == "constant":
        return [i / rate for i in range(count)]
    rng = random.Random(seed)
    offsets, now = [], 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


def prompts(lengths: Sequence[int], vocab: int, seed: int) -> list[list[int]]:
    """Random token-id prompts, one of each of ``lengths`` tokens (ids below ``vocab``)."""
    rng = random.Random(10_000 + seed)
    return [[rng.randrange(vocab) for _ in range(length)] for length in lengths]


def _per_request(output_len: int | Sequence[int], count: int) -> list[int]:
    lengths = [output_len] * count if isinstance(output_len, int) else list(output_len)
    if len(lengths) != count:
        raise ValueError(f"{len(lengths)} output lengths for {count} prompts")
    return lengths


async def _stream_completion(url: str, body: dict[str, Any], record: Record, clock: Callable[[], float],
                             timeout_s: float) -> None:
    """POST ``body`` to ``url`` and read the SSE stream into ``record`` (raw HTTP/1.1: no client
    library, chunked or close-delimited bodies both understood)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    payload = json.dumps(body).encode()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=parts.scheme == "https" or None), timeout_s)
    except (ConnectionError, OSError) as exc:
        raise ServerGone(f"cannot connect to {host}:{port}: {exc}") from exc
    try:
        writer.write(f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                     f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
                     .encode() + payload)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout_s)
        if not status_line:
            raise ServerGone("connection closed before a response")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await asyncio.wait_for(reader.readline(), timeout_s)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        buffer = b""
        usage_tokens: int | None = None
        done = False
        async for data in _body(reader, chunked, timeout_s):
            if status != 200:
                buffer += data
                continue
            buffer += data
            while b"\n\n" in buffer or b"\r\n\r\n" in buffer:
                cut = min(i for i in (buffer.find(b"\n\n"), buffer.find(b"\r\n\r\n")) if i >= 0)
                event, buffer = buffer[:cut], buffer[cut:].lstrip(b"\r\n")
                for line in event.splitlines():
                    if not line.startswith(b"data:"):
                        continue
                    text = line[5:].strip()
                    if text == b"[DONE]":
                        done = True
                        continue
                    message = json.loads(text)
                    choices = message.get("choices") or []
                    if any(c.get("text") for c in choices):
                        record.chunk_s.append(clock() - record.sent_s)
                    if message.get("usage"):
                        usage_tokens = int(message["usage"].get("completion_tokens") or 0)
                    # transformers serve ends its stream after the finish_reason chunk, with no [DONE].
                    done = done or any(c.get("finish_reason") for c in choices)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {buffer[:200].decode(errors='replace')}")
        if not done:
            raise ServerGone("stream ended without [DONE] or a finish_reason (the server went away mid-response)")
        record.latency_s = clock() - record.sent_s
        record.output_tokens = usage_tokens if usage_tokens is not None else len(record.chunk_s)
        record.ok = bool(record.chunk_s)
        if not record.ok:
            record.error = "no content chunk received"
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        raise ServerGone(f"connection lost: {exc}") from exc
    finally:
        writer.close()


async def _body(reader: asyncio.StreamReader, chunked: bool, timeout_s: float):  # -> AsyncIterator[bytes]
    if not chunked:
        while data := await asyncio.wait_for(reader.read(65536), timeout_s):
            yield data
        return
    while True:
        size_line = await asyncio.wait_for(reader.readline(), timeout_s)
        if not size_line:
            raise asyncio.IncompleteReadError(b"", None)
        size = int(size_line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            return
        yield await asyncio.wait_for(reader.readexactly(size), timeout_s)
        await reader.readline()  # the CRLF after each chunk


def _request_body(style: str, model: str, prompt: list[int], wanted: int) -> dict[str, Any]:
    """One streamed completion request in the server's ``style`` (workloads/serving/spec.py REQUEST_STYLES)."""
    body: dict[str, Any] = {"model": model, "max_tokens": wanted, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}
    if style == "text":
        return {**body, "prompt": " ".join(word(token) for token in prompt)}
    return {**body, "prompt": prompt, "min_tokens": wanted, "ignore_eos": True}


@dataclass
class LoadResult:
    records: list[Record]
    duration_s: float  # first send to last end (the denominator of every rate)
    server_gone: str | None = None  # why the load stopped early, if the server went away


async def _run(url: str, model: str, arrival: str, rate: float, concurrency: int, prompt_ids: list[list[int]],
               output_lens: list[int], seed: int, timeout_s: float, on_record: Callable[[Record], None],
               style: str) -> LoadResult:
    start = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - start

    records: list[Record] = []
    gone: list[str] = []
    stop = asyncio.Event()

    async def one(index: int, scheduled: float) -> None:
        wanted = output_lens[index]
        record = Record(index=index, scheduled_s=scheduled, sent_s=clock(), input_tokens=len(prompt_ids[index]),
                        output_len=wanted)
        records.append(record)
        body = _request_body(style, model, prompt_ids[index], wanted)
        try:
            await _stream_completion(url, body, record, clock, timeout_s)
        except ServerGone as exc:
            record.error = str(exc)
            if not gone:
                gone.append(str(exc))
            stop.set()
        except (RuntimeError, ValueError, asyncio.TimeoutError) as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        on_record(record)

    if arrival == "concurrency":
        queue = list(range(len(prompt_ids)))

        async def client() -> None:
            while queue and not stop.is_set():
                await one(queue.pop(0), clock())

        await asyncio.gather(*(client() for _ in range(max(1, concurrency))))
    else:
        tasks = []
        for index, offset in enumerate(arrival_offsets(arrival, rate, len(prompt_ids), seed)):
            delay = offset - clock()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            if stop.is_set():
                break
            tasks.append(asyncio.create_task(one(index, offset)))
        await asyncio.gather(*tasks)
    records.sort(key=lambda r: r.index)
    return LoadResult(records, clock(), gone[0] if gone else None)


def run_load(url: str, *, model: str, arrival: str, rate: float, concurrency: int, prompt_ids: list[list[int]],
             output_len: int | Sequence[int], seed: int = 0, timeout_s: float = 600.0,
             on_record: Callable[[Record], None] = lambda r: None, style: str = "token_ids") -> LoadResult:
    """Drive ``url`` (``.../v1/completions``) with ``prompt_ids`` by ``arrival``, asking for
    ``output_len`` tokens of each (one figure for all, or one per prompt); ``on_record`` is
    called as each request ends (the workload appends it to requests.jsonl at once, so a crash
    later loses none of them); ``style``: how the server wants its requests (``token_ids`` or
    ``text``: workloads/serving/spec.py REQUEST_STYLES)."""
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival {arrival!r}: expected one of {', '.join(ARRIVALS)}")
    output_lens = _per_request(output_len, len(prompt_ids))
    return asyncio.run(_run(url, model, arrival, rate, concurrency, prompt_ids, output_lens, seed, timeout_s,
                            on_record, style))
