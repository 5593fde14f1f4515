#!/bin/bash
# orch run 3b94dc5d04eb35ce: golden/gemm gemm on cosma8:mi100
#SBATCH --job-name=orch-3b94dc5d04eb35ce
#SBATCH --comment=orch-3b94dc5d04eb35ce
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=cosma8-shm2
#SBATCH --account=myproject
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /cosma/home/dp000/user/venvs/torch-rocm/bin/activate
set -u
export ORCH_RUN_ID=3b94dc5d04eb35ce
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=1 --ntasks=1 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 92.3 --output metrics.json
