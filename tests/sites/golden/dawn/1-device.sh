#!/bin/bash
# orch run 86fb419766214abf: golden/gemm gemm on dawn
#SBATCH --job-name=orch-86fb419766214abf
#SBATCH --comment=orch-86fb419766214abf
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
#SBATCH --partition=pvc9
#SBATCH --account=myproject-dawn-gpu
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=12
#SBATCH --output=/scratch/orch/runs/1-device/stdout.log
#SBATCH --error=/scratch/orch/runs/1-device/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module purge
module load rhel9/default-dawn
module load intel-oneapi-ccl intel-oneapi-mpi intel-oneapi-mkl
module load intelpython-conda/2025.0
eval "$(conda shell.bash hook)"
conda activate pytorch-gpu-2.3.1
set -u
export ZE_FLAT_DEVICE_HIERARCHY=FLAT
export CCL_ATL_TRANSPORT=ofi
export FI_PROVIDER=verbs
export CCL_ZE_IPC_EXCHANGE=sockets
export ZES_ENABLE_SYSMAN=1
export ORCH_RUN_ID=86fb419766214abf
export ORCH_RUN_DIR=/scratch/orch/runs/1-device
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/1-device
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
mpirun -n 1 -ppn 1 python -m workloads.gemm --precision bf16 --device xpu --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 419.5 --output metrics.json
