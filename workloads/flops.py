"""FLOP counts of the workloads, as perf-model.md defines them. Pure Python, no torch.

The registry and the orchestrator use these too (for predictions and checks), so
they import nothing heavy. Every function returns a count of floating-point
operations (a multiply-add is 2).
"""

from __future__ import annotations


def gemm(m: int, n: int, k: int) -> int:
    """(M,K) x (K,N): 2*M*N*K."""
    return 2 * m * n * k
