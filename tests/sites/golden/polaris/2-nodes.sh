#!/bin/bash
# orch run cc29cc3e7847acac: golden/gemm gemm on polaris
#PBS -N orch-cc29cc3e7847acac
#PBS -l select=2:system=polaris
#PBS -l walltime=00:30:00
#PBS -l place=scatter
#PBS -l filesystems=home:eagle
#PBS -q debug-scaling
#PBS -A myproject
#PBS -o /scratch/orch/runs/2-nodes/pbs.stdout
#PBS -e /scratch/orch/runs/2-nodes/pbs.stderr
exec >>/scratch/orch/runs/2-nodes/stdout.log 2>>/scratch/orch/runs/2-nodes/stderr.log
set -euo pipefail
set +u  # module, conda and venv activation scripts read unset variables
module use /soft/modulefiles
module load conda
eval "$(conda shell.bash hook)"
conda activate base
set -u
export LD_LIBRARY_PATH=/soft/libraries/hwloc/lib/:/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NET_GDR_LEVEL=PHB
export NCCL_CROSS_NIC=1
export NCCL_COLLNET_ENABLE=1
export NCCL_NET='AWS Libfabric'
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DEFAULT_CQ_SIZE=131072
export ORCH_RUN_ID=cc29cc3e7847acac
export ORCH_RUN_DIR=/scratch/orch/runs/2-nodes
export PYTHONPATH={WORKLOADS_ROOT}"${PYTHONPATH:+:$PYTHONPATH}"
cd /scratch/orch/runs/2-nodes
echo "orch: run $ORCH_RUN_ID on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
cat > orch-gpu-affinity.sh <<'ORCH_AFFINITY'
local_rank=${PMI_LOCAL_RANK:-${PALS_LOCAL_RANKID:-${SLURM_LOCALID:-${MPI_LOCALRANKID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}}}}
export CUDA_VISIBLE_DEVICES=$(( 3 - local_rank % 4 ))
exec "$@"
ORCH_AFFINITY
mpiexec -n 8 --ppn 4 --depth 16 --cpu-bind depth bash orch-gpu-affinity.sh python -m workloads.gemm --precision bf16 --device cuda --size-m 4096 --size-n 4096 --size-k 4096 --peak-tflops 312.0 --output metrics.json
