#!/bin/bash
# orch run 992c661a2f058c2b: golden/gemm gemm on alcf-ai-testbed
#SBATCH --job-name=orch-992c661a2f058c2b
#SBATCH --comment=orch-992c661a2f058c2b
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
#SBATCH --time=24:00:00
#SBATCH --gres=rdu:8
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
export ORCH_RUN_ID=992c661a2f058c2b
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks=1 python -m workloads.gemm compile --pef-name=orch_gemm --output-folder=pef --precision bf16 --device rdu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
srun --nodes=8 --ntasks-per-node=8 --mpi=pmi2 python -m workloads.gemm run --pef=pef/orch_gemm/orch_gemm.pef --precision bf16 --device rdu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
