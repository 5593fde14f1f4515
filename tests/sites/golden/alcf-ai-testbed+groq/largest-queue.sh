#!/bin/bash
# orch run b2b731fc3635cbe9: golden/gemm gemm on alcf-ai-testbed:groq
#PBS -N orch-b2b731fc3635cbe9
#PBS -l select=1
#PBS -l walltime=24:00:00
#PBS -l place=excl
#PBS -o /scratch/orch/runs/largest-queue/pbs.stdout
#PBS -e /scratch/orch/runs/largest-queue/pbs.stderr
exec >>/scratch/orch/runs/largest-queue/stdout.log 2>>/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module and conda scripts read unset variables
conda activate groqflow
set -u
export ORCH_RUN_ID=b2b731fc3635cbe9
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python -m workloads.gemm --precision fp16 --device lpu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
