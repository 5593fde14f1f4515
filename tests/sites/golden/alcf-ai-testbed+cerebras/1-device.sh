#!/bin/bash
# orch run ededac956f51638e: golden/bert bert on alcf-ai-testbed:cerebras
# No batch scheduler: this script runs on the system's own login or user node. A vendor
# runner hands the job to the system's scheduler where it has one (Cerebras: the appliance's
# Kubernetes; follow with `csctl get jobs`, cancel with `csctl cancel job <id>`).
# Devices: 1; walltime budget 00:30:00 (not enforced here).
exec >>/scratch/orch/runs/1-device/stdout.log 2>>/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /home/user/R_2.4.0/venv_cerebras_pt/bin/activate
set -u
export ORCH_RUN_ID=ededac956f51638e
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python -m orchestrator.sites.vendors.params --base /home/user/R_2.4.0/modelzoo/src/cerebras/modelzoo/models/nlp/bert/configs/bert_large_MSL128.yaml --set train_input.batch_size=256 --set model.mixed_precision=true --set model.fp16_type=bfloat16 --set runconfig.max_steps=25 --set runconfig.log_steps=1 --set runconfig.checkpoint_steps=25 --set train_input.max_predictions_per_seq=20 --output orch-params.yaml
python -m orchestrator.sites.vendors.capture --log vendor.log -- python /home/user/R_2.4.0/modelzoo/src/cerebras/modelzoo/models/nlp/bert/run.py CSX --params orch-params.yaml --num_csx=1 --mode train --model_dir model_dir --mount_dirs /home/ /software/ --python_paths /home/user/R_2.4.0/modelzoo/src --compile_dir compile_dir
python -m orchestrator.sites.vendors.cerebras --from vendor.log --output metrics.json --workload bert --precision bf16 --devices 1 --warmup 5 --batch-size 256 --seq-len 128 --device-model 'Cerebras CS-2 (WSE-2)'
