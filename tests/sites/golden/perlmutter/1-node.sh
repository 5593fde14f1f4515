#!/bin/bash
# orch run 1c9be748eac88168: golden/gemm gemm on perlmutter
#SBATCH --job-name=orch-1c9be748eac88168
#SBATCH --comment=orch-1c9be748eac88168
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --account=myproject
#SBATCH --qos=regular
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-gpu=32
#SBATCH --constraint=gpu
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module load conda
eval "$(conda shell.bash hook)"
conda activate torch
set -u
export ORCH_RUN_ID=1c9be748eac88168
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=4 --ntasks=4 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
