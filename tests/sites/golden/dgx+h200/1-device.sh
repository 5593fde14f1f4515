#!/bin/bash
# orch run f2eb1a630c91bdee: golden/gemm gemm on dgx:h200
#SBATCH --job-name=orch-f2eb1a630c91bdee
#SBATCH --comment=orch-f2eb1a630c91bdee
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=h200
#SBATCH --account=myproject
#SBATCH --gres=gpu:1
#SBATCH --exclusive
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/venvs/torch/bin/activate
set -u
export ORCH_RUN_ID=f2eb1a630c91bdee
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=1 --ntasks=1 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 989.4 --output metrics.json
