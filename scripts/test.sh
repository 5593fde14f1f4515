#!/usr/bin/env bash
# The test suite: sets up .venv, then runs every test against the real parts
# (local processes, PyTorch, SQLite, PostgreSQL, the sandbox Slurm cluster the
# fixtures bring up). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
