#!/bin/bash
# orch run c66ce9d080271cec: golden/gemm gemm on lumi
#SBATCH --job-name=orch-c66ce9d080271cec
#SBATCH --comment=orch-c66ce9d080271cec
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --partition=standard-g
#SBATCH --account=myproject
#SBATCH --gpus-per-node=8
#SBATCH --output=/scratch/orch/runs/2-nodes/stdout.log
#SBATCH --error=/scratch/orch/runs/2-nodes/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module use /appl/local/csc/modulefiles/
module load pytorch/2.5
set -u
export ORCH_RUN_ID=c66ce9d080271cec
export ORCH_RUN_DIR=/scratch/orch/runs/2-nodes
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/2-nodes
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
srun --nodes=2 --ntasks-per-node=8 --ntasks=16 python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 191.5 --output metrics.json
