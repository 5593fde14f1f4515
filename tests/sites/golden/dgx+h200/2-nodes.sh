#!/bin/bash
# orch run 972aa995bf7aae60: golden/gemm gemm on dgx:h200
#SBATCH --job-name=orch-972aa995bf7aae60
#SBATCH --comment=orch-972aa995bf7aae60
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --partition=h200
#SBATCH --account=myproject
#SBATCH --gres=gpu:8
#SBATCH --output=/scratch/orch/runs/2-nodes/stdout.log
#SBATCH --error=/scratch/orch/runs/2-nodes/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/venvs/torch/bin/activate
set -u
export ORCH_RUN_ID=972aa995bf7aae60
export ORCH_RUN_DIR=/scratch/orch/runs/2-nodes
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/2-nodes
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=2 --ntasks-per-node=8 --ntasks=16 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 989.4 --output metrics.json
