#!/bin/bash
# orch run bc95073114d722de: golden/gemm gemm on alcf-ai-testbed:graphcore
#SBATCH --job-name=orch-bc95073114d722de
#SBATCH --comment=orch-bc95073114d722de
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=p64
#SBATCH --ipus=64
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
export ORCH_RUN_ID=bc95073114d722de
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks=1 python -m workloads.gemm --precision fp32 --device ipu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
