#!/bin/bash
# orch run 771e3185e52da5f0: golden/gemm gemm on dawn
#SBATCH --job-name=orch-771e3185e52da5f0
#SBATCH --comment=orch-771e3185e52da5f0
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=8
#SBATCH --time=36:00:00
#SBATCH --partition=pvc9
#SBATCH --account=myproject-dawn-gpu
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=12
#SBATCH --output=/scratch/orch/runs/largest-queue/stdout.log
#SBATCH --error=/scratch/orch/runs/largest-queue/stderr.log
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
export ORCH_RUN_ID=771e3185e52da5f0
export ORCH_RUN_DIR=/scratch/orch/runs/largest-queue
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/largest-queue
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
mpirun -n 128 -ppn 8 python -m workloads.gemm --precision bf16 --device xpu --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 419.5 --output metrics.json
