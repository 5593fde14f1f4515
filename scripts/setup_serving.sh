#!/usr/bin/env bash
# Creates .venv-serving and .venv-guidellm: the environments of the third-party servers and load generators that
# llm_serving starts (workloads/serving/launch.py `transformers`), kept apart from .venv so their
# dependencies (transformers, fastapi, openai ...) never reach the workload's Python or a compute
# node's torch stack. It borrows .venv's torch through a .pth file instead of installing a second
# one (a path .pth adds after its own site-packages: its own pinned packages win).
# Safe to re-run: an existing, complete environment is kept. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# make_env DIR REQUIREMENTS CHECK: DIR made (once) with REQUIREMENTS installed, CHECK run by its Python.
make_env() {
  local dir=$1 requirements=$2 check=$3 stamp=$1/.orch-installed
  if [ -f "$stamp" ] && [ "$stamp" -nt "$requirements" ] && [ "$stamp" -nt scripts/setup_serving.sh ]; then
    return 0
  fi
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  local site main_site
  site=$("$dir/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  main_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$main_site" > "$site/orch-main-venv.pth"
  "$dir/bin/python" -m pip install --quiet -r "$requirements" 2>&1 | grep -v "^WARNING: Location" || true
  "$dir/bin/python" -c "$check" >/dev/null 2>&1 || { echo "setup: $dir is incomplete (see pip's output above)" >&2; return 1; }
  touch "$stamp"
}
# Hugging Face's transformers serve (llm_serving --backend transformers).
make_env .venv-serving scripts/serving-requirements.txt \
  "import torch, transformers, fastapi, uvicorn, openai; from transformers.cli.serve import Serve"
# GuideLLM (llm_serving --loadgen guidellm): its own environment, as its pins differ (click).
make_env .venv-guidellm scripts/guidellm-requirements.txt "import guidellm.cli.run"
