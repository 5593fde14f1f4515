#!/usr/bin/env bash
# The style gate: ruff (pycodestyle, pyflakes, import order, bugbear) and mypy, clean on the
# whole tree, with the settings in pyproject.toml. A step of its own, before the tests (.ci/run,
# ./scripts/test.sh --fast): seconds with mypy's cache (.mypy_cache/), a minute or two without.
# Exits non-zero when either finds anything; both run, so one run shows every finding.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "lint: ruff check ." >&2
.venv/bin/ruff check --no-cache . || status=1
echo "lint: mypy" >&2
.venv/bin/mypy || status=1
exit "$status"
