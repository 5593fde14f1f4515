#!/bin/bash
# orch run 9ba8294fe4f42a9e: golden/gemm gemm on sophia:bigmem
#PBS -N orch-9ba8294fe4f42a9e
#PBS -l select=1
#PBS -l walltime=00:30:00
#PBS -l filesystems=home:eagle
#PBS -q bigmem
#PBS -A myproject
#PBS -o /scratch/orch/runs/1-node/pbs.stdout
#PBS -e /scratch/orch/runs/1-node/pbs.stderr
exec >>/scratch/orch/runs/1-node/stdout.log 2>>/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
. /etc/profile
module use /soft/modulefiles
module load conda
eval "$(conda shell.bash hook)"
conda activate base
set -u
export ORCH_RUN_ID=9ba8294fe4f42a9e
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
deepspeed --num_nodes=1 --num_gpus=8 --no_local_rank --module workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
