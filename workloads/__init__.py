"""Benchmark programs, plain PyTorch, each runnable by hand: ``python -m workloads.<name> --help``.

Nothing here imports ``orchestrator``; the orchestrator imports :mod:`workloads.registry`
(which imports no torch) to know the workloads and their parameters.
"""
