#!/bin/bash
# orch run 405ea1091eb36f62: golden/gemm gemm on baskerville:a100_80
#SBATCH --job-name=orch-405ea1091eb36f62
#SBATCH --comment=orch-405ea1091eb36f62
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --account=myproject
#SBATCH --qos=myqos
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-gpu=36
#SBATCH --constraint=a100_80
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module purge
module load baskerville
module load bask-apps/live
module load PyTorch/2.1.2-foss-2022b-CUDA-11.8.0
set -u
export ORCH_RUN_ID=405ea1091eb36f62
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=1 --ntasks=1 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
