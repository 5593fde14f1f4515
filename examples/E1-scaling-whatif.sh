#!/usr/bin/env bash
# Study E (NERSC talk: performance modelling for science foundation models) in orch's terms: the
# talk's figure shapes regenerated from `orch predict --json`, the time model's predictions (no run).
#   scaling      GPT-3 175B, GPT-3 1T and ViT-22B on A100-80GB, H200 and B200 (sites/dgx.yaml systems
#                a100_80, h200, b200), 512 .. 16,384 GPUs; past the profile's 8 nodes each point is
#                a what-if (--what-if-nodes), labelled in the CSV's what_if column
#   nvlink       the same models on 4,096 B200s with NVLink domains of 4, 8 and 64 GPUs (--nvlink-domain)
#   parallelism  the best layout (dp, tp, pp, cp, ZeRO, recompute) at each GPU count
#   tp_sweep, pp_sweep  the talk's sweeps: GPT-3 1T on 16,384 B200s, NVLink 8, micro-batch 1, TP at
#                PP 64 and PP at TP 8 (study-setups.yaml 004-M12), in the CSV
# Writes study-e/study_e.csv, study-e/scaling.png and study-e/nvlink.png (matplotlib).
#   examples/E1-scaling-whatif.sh [--out DIR] [--quick] [--no-figures]
# One point by hand:
#   orch predict --model gpt3-1t --site dgx:b200 --devices 16384 --what-if-nodes 2048 --nvlink-domain 64 --json
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${PYTHON:-python3}" "$here/benchmarks/study_e_whatif.py" "$@"
