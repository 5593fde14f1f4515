#!/bin/bash
# orch run f6237db10c0a0624: golden/gemm gemm on lumi
#SBATCH --job-name=orch-f6237db10c0a0624
#SBATCH --comment=orch-f6237db10c0a0624
#SBATCH --nodes=1024
#SBATCH --ntasks-per-node=8
#SBATCH --time=48:00:00
#SBATCH --partition=standard-g
#SBATCH --account=myproject
#SBATCH --gpus-per-node=8
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module use /appl/local/csc/modulefiles/
module load pytorch/2.5
set -u
export ORCH_RUN_ID=f6237db10c0a0624
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1024 --ntasks-per-node=8 --ntasks=8192 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 191.5 --output metrics.json
