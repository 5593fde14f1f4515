#!/bin/bash
# orch run 6cd3fe64ce580f0f: golden/resnet50 resnet50 on alcf-ai-testbed:graphcore
#SBATCH --job-name=orch-6cd3fe64ce580f0f
#SBATCH --comment=orch-6cd3fe64ce580f0f
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=p64
#SBATCH --ipus=64
#SBATCH --output=/scratch/orch/runs/1-node/stdout.log
#SBATCH --error=/scratch/orch/runs/1-node/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /software/graphcore/poplar_sdk/3.3.0/enable
source /home/user/venvs/graphcore/poptorch33_env/bin/activate
set -u
export ORCH_RUN_ID=6cd3fe64ce580f0f
export ORCH_RUN_DIR=/scratch/orch/runs/1-node
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-node
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python -m orchestrator.sites.vendors.capture --expand --log vendor.log -- srun --nodes=1 --ntasks=1 poprun -vv '--vipu-partition=slurm_${SLURM_JOBID}' --num-instances=1 --num-replicas=64 --executable-cache-path=pt_cache python /home/user/graphcore/examples/vision/cnns/pytorch/train/train.py --config resnet50 --replicas 64 --batch-size 32 --gradient-accumulation 1 --precision 16.16 --imagenet-data-path /mnt/localdata/datasets/imagenet-raw-dataset --epoch 2 --validation-mode none --dataloader-worker 14 --dataloader-rebatch-size 256
python -m orchestrator.sites.vendors.graphcore --from vendor.log --output metrics.json --workload resnet50 --precision fp16 --devices 64 --device-model 'Graphcore Bow IPU'
