#!/bin/bash
# orch run b6c45102ccdabc94: golden/gemm gemm on alcf-ai-testbed
#SBATCH --job-name=orch-b6c45102ccdabc94
#SBATCH --comment=orch-b6c45102ccdabc94
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --gres=rdu:8
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
export ORCH_RUN_ID=b6c45102ccdabc94
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks=1 python -m workloads.gemm compile --pef-name=orch_gemm --output-folder=pef --precision bf16 --device rdu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
srun --nodes=1 --ntasks-per-node=8 python -m workloads.gemm run --pef=pef/orch_gemm/orch_gemm.pef --precision bf16 --device rdu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
