#!/bin/bash
# orch run eab5ce1f7909ebba: golden/gemm gemm on local
# Runs on this machine through submitit's local executor, once it holds a core per process;
# walltime 00:30:00 counts from then.
set -euo pipefail
export ORCH_RUN_ID=eab5ce1f7909ebba
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python3 -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=4 -m workloads.gemm --precision bf16 --device cpu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
