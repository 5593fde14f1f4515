#!/bin/bash
# orch run 8a9ff16393de4ab5: golden/gemm gemm on stanage:a100
#SBATCH --job-name=orch-8a9ff16393de4ab5
#SBATCH --comment=orch-8a9ff16393de4ab5
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=96:00:00
#SBATCH --partition=gpu
#SBATCH --qos=gpu
#SBATCH --gres=gpu:4
#SBATCH --mem=82G
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load Anaconda3/2022.10
module load cuDNN/8.9.2.26-CUDA-12.1.1
eval "$(conda shell.bash hook)"
conda activate pytorch
set -u
export ORCH_RUN_ID=8a9ff16393de4ab5
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=4 --ntasks=4 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
