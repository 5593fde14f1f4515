#!/bin/bash
# orch run cf6bfc43fe3d1b21: golden/gemm gemm on sophia
#PBS -N orch-cf6bfc43fe3d1b21
#PBS -l select=2
#PBS -l walltime=00:30:00
#PBS -l filesystems=home:eagle
#PBS -q by-node
#PBS -A myproject
#PBS -o /scratch/orch/runs/2-nodes/pbs.stdout
#PBS -e /scratch/orch/runs/2-nodes/pbs.stderr
exec >>/scratch/orch/runs/2-nodes/stdout.log 2>>/scratch/orch/runs/2-nodes/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
. /etc/profile
module use /soft/modulefiles
module load conda
eval "$(conda shell.bash hook)"
conda activate base
set -u
export ORCH_RUN_ID=cf6bfc43fe3d1b21
export ORCH_RUN_DIR=/scratch/orch/runs/2-nodes
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/2-nodes
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
MASTER_ADDR="$(head -n 1 "$PBS_NODEFILE")"
export PET_RDZV_ID="${PBS_JOBID%%.*}"
export MASTER_ADDR
export PET_RDZV_ENDPOINT="${MASTER_ADDR}:29400"
awk '!seen[$0]++ {print $0 " slots=8"}' "$PBS_NODEFILE" > orch-hostfile
deepspeed --num_nodes=2 --num_gpus=8 --hostfile=orch-hostfile --launcher=pdsh --master_port=29500 --no_local_rank --module workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
