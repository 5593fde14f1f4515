#!/bin/bash
# orch run 679d50d0f8ab4c95: golden/gemm gemm on stanage
#SBATCH --job-name=orch-679d50d0f8ab4c95
#SBATCH --comment=orch-679d50d0f8ab4c95
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --time=00:30:00
#SBATCH --partition=gpu-h100
#SBATCH --qos=gpu
#SBATCH --gres=gpu:2
#SBATCH --mem=82G
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load Anaconda3/2022.10
module load cuDNN/8.9.2.26-CUDA-12.1.1
eval "$(conda shell.bash hook)"
conda activate pytorch
set -u
export ORCH_RUN_ID=679d50d0f8ab4c95
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=2 --ntasks=2 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 756.0 --output metrics.json
