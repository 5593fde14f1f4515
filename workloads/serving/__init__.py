"""Serving benchmarks: an OpenAI-compatible server under load (workloads/llm_serving.py).

- ``cpu_server``: orch's own small OpenAI-compatible server over the Llama-style engine
  (``/health``, ``/v1/completions`` with SSE streaming); the ``builtin`` backend.
- ``launch``: the command that starts each backend's server, its health wait and its stop.
- ``loadgen``: the asyncio load generator (Poisson, constant rate, fixed concurrency) that
  writes one record per request.
- ``figures``: TTFT/ITL/TPOT/end-to-end percentiles, rates and goodput from those records.

``figures`` and ``loadgen`` import no torch.
"""
