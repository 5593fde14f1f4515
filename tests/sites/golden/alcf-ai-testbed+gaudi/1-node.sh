#!/bin/bash
# orch run 769b8366149abfd8: golden/gemm gemm on alcf-ai-testbed:gaudi
# No batch scheduler: run this script from a login node of the system. The vendor's
# runner hands the job to the system's own scheduler (Cerebras: the appliance's
# Kubernetes; follow with `csctl get jobs`, cancel with `csctl cancel job <id>`).
# Devices: 8; walltime budget 00:30:00 (not enforced here).
exec >>/scratch/orch/runs/1-node/stdout.log 2>>/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
export ORCH_RUN_ID=769b8366149abfd8
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python Model-References/PyTorch/examples/gaudi_spawn.py --world_size 8 --use_mpi {WORKLOADS_ROOT}/workloads/gemm.py --precision bf16 --device hpu --size-m 4096 --size-n 4096 --size-k 4096 --output metrics.json
