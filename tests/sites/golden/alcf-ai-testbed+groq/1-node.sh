#!/bin/bash
# orch run b2b731fc3635cbe9: golden/gemm gemm on alcf-ai-testbed:groq
#PBS -N orch-b2b731fc3635cbe9
#PBS -l select=1
#PBS -l walltime=00:30:00
#PBS -l place=excl
#PBS -o /scratch/orch/runs/1-node/pbs.stdout
#PBS -e /scratch/orch/runs/1-node/pbs.stderr
exec >>/scratch/orch/runs/1-node/stdout.log 2>>/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module and conda scripts read unset variables
conda activate groqflow
set -u
export ORCH_RUN_ID=b2b731fc3635cbe9
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python -m workloads.gemm --precision fp16 --device lpu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
