#!/bin/bash
# orch run 6c1943cb2d0f9ea9: golden/gemm gemm on perlmutter
#SBATCH --job-name=orch-6c1943cb2d0f9ea9
#SBATCH --comment=orch-6c1943cb2d0f9ea9
#SBATCH --nodes=1536
#SBATCH --ntasks-per-node=4
#SBATCH --time=48:00:00
#SBATCH --account=myproject
#SBATCH --qos=regular
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-gpu=32
#SBATCH --constraint=gpu
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load conda
eval "$(conda shell.bash hook)"
conda activate torch
set -u
export ORCH_RUN_ID=6c1943cb2d0f9ea9
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1536 --ntasks-per-node=4 --ntasks=6144 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
