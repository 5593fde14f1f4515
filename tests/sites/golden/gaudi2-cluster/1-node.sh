#!/bin/bash
# orch run 6f53a63b2093eb90: golden/gemm gemm on gaudi2-cluster
#SBATCH --job-name=orch-6f53a63b2093eb90
#SBATCH --comment=orch-6f53a63b2093eb90
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --partition=gaudi2
#SBATCH --account=myproject
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/habanalabs-venv/bin/activate
set -u
export GC_KERNEL_PATH=/usr/lib/habanalabs/libtpc_kernels.so
export ORCH_RUN_ID=6f53a63b2093eb90
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
deepspeed --num_nodes=1 --num_gpus=8 --no_local_rank --module workloads.gemm --precision bf16 --device hpu --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 432.0 --output metrics.json
