#!/bin/bash
# orch run 0b30210b4f06be47: golden/resnet50 resnet50 on graphcore-pod16
#SBATCH --job-name=orch-0b30210b4f06be47
#SBATCH --comment=orch-0b30210b4f06be47
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=pod16
#SBATCH --account=myproject
#SBATCH --ipus=1
#SBATCH --exclusive
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
source /opt/graphcore/poplar_sdk-3.3.0/enable
source /home/user/venvs/poptorch/bin/activate
set -u
export ORCH_RUN_ID=0b30210b4f06be47
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
python -m orchestrator.sites.vendors.capture --expand --log vendor.log -- srun --nodes=1 --ntasks=1 poprun -vv '--vipu-partition=slurm_${SLURM_JOBID}' --num-instances=1 --num-replicas=1 --executable-cache-path=pt_cache python /home/user/graphcore/examples/vision/cnns/pytorch/train/train.py --config resnet50 --replicas 1 --batch-size 32 --gradient-accumulation 1 --precision 16.16 --imagenet-data-path imagenet --epoch 2 --validation-mode none --dataloader-worker 14 --dataloader-rebatch-size 256
python -m orchestrator.sites.vendors.graphcore --from vendor.log --output metrics.json --workload resnet50 --precision fp16 --devices 1 --device-model 'Graphcore GC200 IPU'
