#!/bin/bash
# orch run fd986e8f1fc20d5f: golden/gemm gemm on sophia
#PBS -N orch-fd986e8f1fc20d5f
#PBS -l select=8
#PBS -l walltime=12:00:00
#PBS -l filesystems=home:eagle
#PBS -q by-node
#PBS -A myproject
#PBS -o /scratch/orch/runs/largest-queue/pbs.stdout
#PBS -e /scratch/orch/runs/largest-queue/pbs.stderr
exec >>/scratch/orch/runs/largest-queue/stdout.log 2>>/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
. /etc/profile
module use /soft/modulefiles
module load conda
eval "$(conda shell.bash hook)"
conda activate base
set -u
export ORCH_RUN_ID=fd986e8f1fc20d5f
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
MASTER_ADDR="$(head -n 1 "$PBS_NODEFILE")"
export PET_RDZV_ID="${PBS_JOBID%%.*}"
export MASTER_ADDR
export PET_RDZV_ENDPOINT="${MASTER_ADDR}:29400"
awk '!seen[$0]++ {print $0 " slots=8"}' "$PBS_NODEFILE" > orch-hostfile
deepspeed --num_nodes=8 --num_gpus=8 --hostfile=orch-hostfile --launcher=pdsh --master_port=29500 --no_local_rank --module workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
