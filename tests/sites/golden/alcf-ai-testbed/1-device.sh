#!/bin/bash
# orch run 0a96dd3fb704d6c9: golden/bert bert on alcf-ai-testbed
#SBATCH --job-name=orch-0a96dd3fb704d6c9
#SBATCH --comment=orch-0a96dd3fb704d6c9
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --gres=rdu:1
#SBATCH --exclusive
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /opt/sambaflow/apps/nlp/transformers_on_rdu/venv/bin/activate
set -u
export ORCH_RUN_ID=0a96dd3fb704d6c9
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python /opt/sambaflow/apps/nlp/transformers_on_rdu/transformers_hook.py compile -b 32 --per_device_train_batch_size 32 --output_dir=hf_output --overwrite_output_dir --do_train --cache_dir cache --model_name_or_path bert-large-uncased --tokenizer_name bert-large-uncased --module_name mlm_ns --task_name mlm_ns --max_seq_length 128 --non_split_head --dense_adam --compiler-configs-file /opt/sambaflow/apps/nlp/transformers_on_rdu/human_decisions/compiler_configs/compiler_configs_bertlarge_sc_mlm_ml_perf_fullfeature_macv2_gm_e2e.json --mac-human-decision /opt/sambaflow/apps/nlp/transformers_on_rdu/human_decisions/mac_overrides/bertlarge_sc_training_mlm_ml_perf_fullfeature_macv2.json --mac-v2 --weight_decay 0.01 --max_grad_norm_clip 1.0 --adam_beta2 0.98 --num-tiles 4 --pef-name=orch_bert --output-folder=pef
python -m orchestrator.sites.vendors.capture --log vendor.log -- srun --nodes=1 --ntasks-per-node=1 --mpi=pmi2 python /opt/sambaflow/apps/nlp/transformers_on_rdu/transformers_hook.py run -b 32 --per_device_train_batch_size 32 --output_dir=hf_output --overwrite_output_dir --do_train --cache_dir cache --model_name_or_path bert-large-uncased --tokenizer_name bert-large-uncased --module_name mlm_ns --task_name mlm_ns --max_seq_length 128 --non_split_head --dense_adam --data_dir /data/ANL/wikicorpus_en/ --max_predictions_per_seq 20 --max_steps 25 --steps_this_run 25 --logging_steps 1 --weight_decay 0.01 --learning_rate 0.000175 --adam_beta2 0.98 --max_grad_norm_clip 1.0 --skip_checkpoint --pef=pef/orch_bert/orch_bert.pef
python -m orchestrator.sites.vendors.sambanova --from vendor.log --output metrics.json --workload bert --precision bf16 --devices 1 --seq-len 128 --device-model 'SambaNova SN30 RDU'
