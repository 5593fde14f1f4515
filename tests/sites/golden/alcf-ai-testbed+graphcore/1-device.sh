#!/bin/bash
# orch run 5da2ec21d9d05cd3: golden/gemm gemm on alcf-ai-testbed:graphcore
#SBATCH --job-name=orch-5da2ec21d9d05cd3
#SBATCH --comment=orch-5da2ec21d9d05cd3
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=p64
#SBATCH --ipus=1
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
export ORCH_RUN_ID=5da2ec21d9d05cd3
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks=1 python -m workloads.gemm --precision fp32 --device ipu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
