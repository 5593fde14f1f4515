#!/usr/bin/env bash
# The test suite: sets up .venv, then runs every test against the real parts
# (local processes, PyTorch, SQLite, PostgreSQL, the sandbox Slurm cluster the
# fixtures bring up). Extra arguments go to pytest.
#
# Tests run on several pytest-xdist workers at once (most of them wait on a
# scheduler, a server or a subprocess): ORCH_TEST_WORKERS sets how many (default:
# twice the usable cores, at least 2; 0 runs everything in this one process).
# Tests that measure a time run with nothing beside them, and the sandbox
# cluster's tests run on one worker in order (tests/conftest.py says how).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
workers=${ORCH_TEST_WORKERS:-$(( $(nproc) * 2 ))}
parallel=(-n "$workers" --dist loadgroup)
for arg in "$@"; do
  # The caller's own -n (or -p no:xdist) wins.
  case "$arg" in -n|-n*|--numprocesses*|no:xdist|-pno:xdist) parallel=() ;; esac
done
[ "$workers" = 0 ] && parallel=()
exec .venv/bin/python -m pytest "${parallel[@]}" "$@"
