#!/usr/bin/env bash
# Creates .venv and installs orch with everything its tests and workloads need.
# Safe to re-run: an existing, complete environment is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# Headless Chromium opens `orch report` pages in tests/e2e/test_report.py (Debian's package).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "setup: could not install chromium (apt-get install chromium); the report test needs it" >&2
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.orch-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  # torch first, pinned: on the project's machines 2.13.0 is the CPU build on disk.
  .venv/bin/python -m pip install --quiet "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
  .venv/bin/python -m pip install --quiet -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
  # DeepSpeed builds against the torch just installed (not a fresh one in an isolated build), with
  # the C++ op its CPU communication backend loads (shm_comm) built in: otherwise the first run
  # compiles it inside its timed region, under a lock a killed run leaves in ~/.cache for every
  # later run to wait on. No wheel cache: a cached wheel built without the op would be reused.
  if ! .venv/bin/python -c "from deepspeed.git_version_info import installed_ops as o, version as v; \
      assert v == '0.19.8' and o['deepspeed_shm_comm']" >/dev/null 2>&1; then
    echo "setup: building DeepSpeed 0.19.8 with its shm_comm op (a few minutes, once)" >&2
    DS_BUILD_SHM_COMM=1 .venv/bin/python -m pip install --quiet --no-cache-dir --force-reinstall --no-deps \
      --no-build-isolation "deepspeed==0.19.8" 2>&1 | grep -v "^WARNING: Location" || true
    .venv/bin/python -m pip install --quiet --no-build-isolation "deepspeed==0.19.8" 2>&1 \
      | grep -v "^WARNING: Location" || true
  fi
  .venv/bin/python -c "from deepspeed.git_version_info import installed_ops as o; assert o['deepspeed_shm_comm']" \
    >/dev/null 2>&1 || { echo "setup: DeepSpeed was installed without its shm_comm op (see pip's output above)" >&2; exit 1; }
  .venv/bin/python -c "import orchestrator, torch, submitit, sqlalchemy, typer, deepspeed, pyarrow, ruptures, scipy" >/dev/null 2>&1 \
    || { echo "setup: the environment is incomplete (see pip's output above)" >&2; exit 1; }
  touch "$stamp"
fi
# Bytecode of orch's own modules, kept beside them (__pycache__/, ignored by git): where
# PYTHONDONTWRITEBYTECODE is set (this project's machines set it, as many container images do),
# every orch command and every run's processes would compile them from source again, 0.1-0.2 s
# of CPU each. Python checks each file against its source, so an edited module is still read
# as edited. Quick when nothing changed.
.venv/bin/python -m compileall -q -j 0 orchestrator workloads benchmarks scripts tests db >/dev/null 2>&1 || true
# The serving environment (.venv-serving): Hugging Face's transformers serve for llm_serving's
# `transformers` backend and its tests, apart from .venv.
scripts/setup_serving.sh
