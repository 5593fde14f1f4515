#!/bin/bash
# orch run 88958b2ebc5c44fe: golden/gemm gemm on lumi
#SBATCH --job-name=orch-88958b2ebc5c44fe
#SBATCH --comment=orch-88958b2ebc5c44fe
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --partition=small-g
#SBATCH --account=myproject
#SBATCH --gpus-per-node=8
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module use /appl/local/csc/modulefiles/
module load pytorch/2.5
set -u
export ORCH_RUN_ID=88958b2ebc5c44fe
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=1 --ntasks-per-node=8 --ntasks=8 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 191.5 --output metrics.json
