#!/bin/bash
# orch run 2df1335f0df537ca: golden/gemm gemm on alcf-ai-testbed
#SBATCH --job-name=orch-2df1335f0df537ca
#SBATCH --comment=orch-2df1335f0df537ca
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --gres=rdu:1
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
export ORCH_RUN_ID=2df1335f0df537ca
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks=1 python -m workloads.gemm compile --pef-name=orch_gemm --output-folder=pef --precision bf16 --device rdu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
srun --nodes=1 --ntasks-per-node=1 python -m workloads.gemm run --pef=pef/orch_gemm/orch_gemm.pef --precision bf16 --device rdu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
