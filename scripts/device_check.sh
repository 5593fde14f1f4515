#!/usr/bin/env bash
# The device check (issue 26) on a machine without network: installs orch and the packages that
# machine lacks from the wheels carried in .carry/wheels (scripts/carry_wheels.py made them, where
# PyPI is reachable), offline, then runs benchmarks/device_check.py with the arguments given.
#   scripts/device_check.sh                 # on the one-GPU machine: output in device-check-out/<time>/
#   scripts/device_check.sh --out /tmp/dc   # any argument of benchmarks/device_check.py
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=${ORCH_WHEELS:-.carry/wheels}
if ! "$PYTHON" -c "import sqlalchemy, alembic, pydantic, submitit, psycopg, deepspeed" >/dev/null 2>&1; then
  if [ ! -d "$WHEELS" ] || ! ls "$WHEELS"/orch-*.whl >/dev/null 2>&1; then
    echo "device_check: no wheels in $WHEELS: run scripts/carry_wheels.py where PyPI is reachable and carry the folder" >&2
    exit 2
  fi
  # --no-index: nothing is fetched; what the machine has (torch, numpy, jinja2 ...) is kept.
  "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" orch deepspeed
fi
exec "$PYTHON" benchmarks/device_check.py "$@"
