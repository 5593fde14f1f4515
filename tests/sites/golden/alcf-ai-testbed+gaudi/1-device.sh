#!/bin/bash
# orch run ef8e4e6a02c48e1b: golden/gemm gemm on alcf-ai-testbed:gaudi
# No batch scheduler: this script runs on the system's own login or user node. A vendor
# runner hands the job to the system's scheduler where it has one (Cerebras: the appliance's
# Kubernetes; follow with `csctl get jobs`, cancel with `csctl cancel job <id>`).
# Devices: 1; walltime budget 00:30:00 (not enforced here).
exec >>/scratch/orch/runs/1-device/stdout.log 2>>/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/habanalabs-venv/bin/activate
set -u
export GC_KERNEL_PATH=/usr/lib/habanalabs/libtpc_kernels.so
export ORCH_RUN_ID=ef8e4e6a02c48e1b
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
deepspeed --num_nodes=1 --num_gpus=1 --no_local_rank --module workloads.gemm --precision bf16 --device hpu --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 432.0 --output metrics.json
