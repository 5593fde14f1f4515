#!/bin/bash
# orch run 30a5cb1dede7f588: golden/gemm gemm on alcf-ai-testbed:cerebras
# No batch scheduler: run this script from a login node of the system. The vendor's
# runner hands the job to the system's own scheduler (Cerebras: the appliance's
# Kubernetes; follow with `csctl get jobs`, cancel with `csctl cancel job <id>`).
# Devices: 1; walltime budget 00:30:00 (not enforced here).
exec >>/scratch/orch/runs/1-device/stdout.log 2>>/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
export ORCH_RUN_ID=30a5cb1dede7f588
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python modelzoo/src/cerebras/modelzoo/models/nlp/gpt2/run.py CSX --params params.yaml --num_csx=1 --mode train --model_dir model_dir --compile_dir compile_dir
