#!/bin/bash
# orch run 6ce5f67934a898f3: golden/gemm gemm on perlmutter
#SBATCH --job-name=orch-6ce5f67934a898f3
#SBATCH --comment=orch-6ce5f67934a898f3
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --account=myproject
#SBATCH --qos=shared
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-gpu=32
#SBATCH --constraint=gpu
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load conda
eval "$(conda shell.bash hook)"
conda activate torch
set -u
export ORCH_RUN_ID=6ce5f67934a898f3
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=1 --ntasks=1 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
