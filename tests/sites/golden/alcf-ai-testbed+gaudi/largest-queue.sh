#!/bin/bash
# orch run 769b8366149abfd8: golden/gemm gemm on alcf-ai-testbed:gaudi
# No batch scheduler: this script runs on the system's own login or user node. A vendor
# runner hands the job to the system's scheduler where it has one (Cerebras: the appliance's
# Kubernetes; follow with `csctl get jobs`, cancel with `csctl cancel job <id>`).
# Devices: 8; walltime budget 24:00:00 (not enforced here).
exec >>/scratch/orch/runs/largest-queue/stdout.log 2>>/scratch/orch/runs/largest-queue/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/habanalabs-venv/bin/activate
set -u
export GC_KERNEL_PATH=/usr/lib/habanalabs/libtpc_kernels.so
export ORCH_RUN_ID=769b8366149abfd8
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
deepspeed --num_nodes=1 --num_gpus=8 --no_local_rank --module workloads.gemm --precision bf16 --device hpu --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 432.0 --output metrics.json
