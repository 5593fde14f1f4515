#!/bin/bash
# orch run 9f135d8523a1c0fd: golden/gemm gemm on perlmutter
#SBATCH --job-name=orch-9f135d8523a1c0fd
#SBATCH --comment=orch-9f135d8523a1c0fd
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --account=myproject
#SBATCH --qos=regular
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-gpu=32
#SBATCH --constraint=gpu
#SBATCH --output=/scratch/orch/runs/2-nodes/stdout.log
#SBATCH --error=/scratch/orch/runs/2-nodes/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load conda
eval "$(conda shell.bash hook)"
conda activate torch
set -u
export ORCH_RUN_ID=9f135d8523a1c0fd
export ORCH_RUN_DIR=/scratch/orch/runs/2-nodes
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/2-nodes
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=2 --ntasks-per-node=4 --ntasks=8 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
