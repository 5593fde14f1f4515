#!/bin/bash
# orch run 9692e423e69c8a94: golden/gemm gemm on dgx:b200
#SBATCH --job-name=orch-9692e423e69c8a94
#SBATCH --comment=orch-9692e423e69c8a94
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=8
#SBATCH --time=24:00:00
#SBATCH --partition=b200
#SBATCH --account=myproject
#SBATCH --gres=gpu:8
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/venvs/torch/bin/activate
set -u
export ORCH_RUN_ID=9692e423e69c8a94
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=8 --ntasks-per-node=8 --ntasks=64 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 2250.0 --output metrics.json
