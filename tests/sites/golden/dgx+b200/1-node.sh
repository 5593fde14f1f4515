#!/bin/bash
# orch run 54a451bb3d36724f: golden/gemm gemm on dgx:b200
#SBATCH --job-name=orch-54a451bb3d36724f
#SBATCH --comment=orch-54a451bb3d36724f
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --partition=b200
#SBATCH --account=myproject
#SBATCH --gres=gpu:8
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/venvs/torch/bin/activate
set -u
export ORCH_RUN_ID=54a451bb3d36724f
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=8 --ntasks=8 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 2250.0 --output metrics.json
