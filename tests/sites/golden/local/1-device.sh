#!/bin/bash
# orch run f13a8788bd92d81b: golden/gemm gemm on local
# Runs on this machine through submitit's local executor, once it holds a core per process;
# walltime 00:30:00 counts from then.
set -euo pipefail
export ORCH_RUN_ID=f13a8788bd92d81b
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python3 -m workloads.gemm --precision bf16 --device cpu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
