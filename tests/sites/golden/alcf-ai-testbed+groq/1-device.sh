#!/bin/bash
# orch run 736d5c2df235b790: golden/resnet50 resnet50 on alcf-ai-testbed:groq
#PBS -N orch-736d5c2df235b790
#PBS -l select=1
#PBS -l walltime=00:30:00
#PBS -l place=excl
#PBS -o /scratch/orch/runs/1-device/pbs.stdout
#PBS -e /scratch/orch/runs/1-device/pbs.stderr
exec >>/scratch/orch/runs/1-device/stdout.log 2>>/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
eval "$(/home/user/miniconda3/bin/conda shell.bash hook)"
conda activate groqflow
set -u
export ORCH_RUN_ID=736d5c2df235b790
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python -m orchestrator.sites.vendors.capture --log vendor.log -- python /home/user/groqflow/proof_points/computer_vision/resnet50/resnet50.py
python -m orchestrator.sites.vendors.groq --from vendor.log --output metrics.json --workload resnet50 --precision fp16 --devices 1 --warmup 0 --device-model 'GroqCard (GroqChip)'
