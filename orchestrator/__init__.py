"""orch: benchmark campaigns of AI workloads on HPC centres."""

__version__ = "0.1.0"
