#!/bin/bash
# orch run a094f0d9f72aa089: golden/gemm gemm on jade2
#SBATCH --job-name=orch-a094f0d9f72aa089
#SBATCH --comment=orch-a094f0d9f72aa089
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=small
#SBATCH --gres=gpu:1
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /jmain02/home/user/venvs/torch/bin/activate
set -u
export ORCH_RUN_ID=a094f0d9f72aa089
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=1 --ntasks=1 python -m workloads.gemm --precision fp32 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 15.7 --output metrics.json
