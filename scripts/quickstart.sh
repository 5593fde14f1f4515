#!/usr/bin/env bash
# The quick start on a fresh machine: set up, then run the GEMM sweep on the local site
# (SQLite under .orch/ here) and print its results table.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/orch run examples/quickstart.yaml --site local
echo
echo 'One row per finished run:'
.venv/bin/orch sql --format json "SELECT workload, precision, devices, tflops FROM results"
