#!/bin/bash
# orch run c0d1120ead8a0c83: golden/gemm gemm on gaudi2-cluster
#SBATCH --job-name=orch-c0d1120ead8a0c83
#SBATCH --comment=orch-c0d1120ead8a0c83
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#SBATCH --partition=gaudi2
#SBATCH --account=myproject
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --output=/scratch/orch/runs/2-nodes/stdout.log
#SBATCH --error=/scratch/orch/runs/2-nodes/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/habanalabs-venv/bin/activate
set -u
export GC_KERNEL_PATH=/usr/lib/habanalabs/libtpc_kernels.so
export ORCH_RUN_ID=c0d1120ead8a0c83
export ORCH_RUN_DIR=/scratch/orch/runs/2-nodes
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/2-nodes
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
export PET_RDZV_ID="${SLURM_JOB_ID}"
export MASTER_ADDR
export PET_RDZV_ENDPOINT="${MASTER_ADDR}:29400"
scontrol show hostnames "$SLURM_JOB_NODELIST" | sed 's/$/ slots=8/' > orch-hostfile
deepspeed --num_nodes=2 --num_gpus=8 --hostfile=orch-hostfile --launcher=slurm --master_port=29500 --no_local_rank --module workloads.gemm --precision bf16 --device hpu --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 432.0 --output metrics.json
