"""Predictions: the time model, the memory model (traced from the programs of workloads/),
calibration and `orch predict`."""
