#!/usr/bin/env bash
# Creates .venv-serving: the environment of the third-party servers and load generators that
# llm_serving starts (workloads/serving/launch.py `transformers`), kept apart from .venv so their
# dependencies (transformers, fastapi, openai ...) never reach the workload's Python or a compute
# node's torch stack. It borrows .venv's torch through a .pth file instead of installing a second
# one (a path .pth adds after its own site-packages: its own pinned packages win).
# Safe to re-run: an existing, complete environment is kept. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
requirements=scripts/serving-requirements.txt
stamp=.venv-serving/.orch-installed
if [ -f "$stamp" ] && [ "$stamp" -nt "$requirements" ] && [ "$stamp" -nt scripts/setup_serving.sh ]; then
  exit 0
fi
[ -x .venv-serving/bin/python ] || "$PYTHON" -m venv .venv-serving
site=$(.venv-serving/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
main_site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$main_site" > "$site/orch-main-venv.pth"
.venv-serving/bin/python -m pip install --quiet -r "$requirements" 2>&1 | grep -v "^WARNING: Location" || true
.venv-serving/bin/python -c "import torch, transformers, fastapi, uvicorn, openai; from transformers.cli.serve import Serve" \
  >/dev/null 2>&1 || { echo "setup: .venv-serving is incomplete (see pip's output above)" >&2; exit 1; }
touch "$stamp"
