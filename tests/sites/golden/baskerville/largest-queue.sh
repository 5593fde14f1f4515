#!/bin/bash
# orch run 1455ea61c6b8e0d0: golden/gemm gemm on baskerville
#SBATCH --job-name=orch-1455ea61c6b8e0d0
#SBATCH --comment=orch-1455ea61c6b8e0d0
#SBATCH --nodes=8
#SBATCH --ntasks-per-node=4
#SBATCH --time=96:00:00
#SBATCH --account=myproject
#SBATCH --qos=myqos
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-gpu=36
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module purge
module load baskerville
module load bask-apps/live
module load PyTorch/2.1.2-foss-2022b-CUDA-11.8.0
set -u
export ORCH_RUN_ID=1455ea61c6b8e0d0
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=8 --ntasks-per-node=4 --ntasks=32 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
