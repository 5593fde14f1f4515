#!/bin/bash
# orch run 2cf2d67096da3658: golden/gemm gemm on stanage
#SBATCH --job-name=orch-2cf2d67096da3658
#SBATCH --comment=orch-2cf2d67096da3658
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=gpu-h100
#SBATCH --qos=gpu
#SBATCH --gres=gpu:1
#SBATCH --mem=82G
#SBATCH --exclusive
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load Anaconda3/2022.10
module load cuDNN/8.9.2.26-CUDA-12.1.1
eval "$(conda shell.bash hook)"
conda activate pytorch
set -u
export ORCH_RUN_ID=2cf2d67096da3658
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=1 --ntasks=1 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 756.0 --output metrics.json
