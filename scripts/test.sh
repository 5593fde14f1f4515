#!/usr/bin/env bash
# The test suite: sets up .venv, then runs every test against the real parts
# (local processes, PyTorch, SQLite, PostgreSQL, the sandbox Slurm cluster the
# fixtures bring up). Extra arguments go to pytest.
#
# Two passes. First every test not marked `measures`, on several pytest-xdist
# workers at once (most of them wait on a scheduler, a server or a subprocess):
# ORCH_TEST_WORKERS sets how many (default twice the usable cores; 0 runs
# everything in one process). Then the `measures` tests (they assert on a time or
# a rate they measured), one at a time with nothing else of the suite running.
# Tests that share one stateful thing (the sandbox Slurm cluster, a module-scoped
# set-up) run on one worker in order: tests/conftest.py's test_group says which.
#
# --fast (first argument): the developer's loop, a few minutes (docs/testing.md): the style gate
# (scripts/lint.sh), then the unit and site tests not marked slow, slurm or measures, in one pass.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || exit $?
if [ "${1:-}" = --fast ]; then
  shift
  ./scripts/lint.sh || exit $?
  exec .venv/bin/python -m pytest -n "${ORCH_TEST_WORKERS:-$(( $(nproc) * 2 ))}" --dist loadgroup \
    -m "not slow and not slurm and not measures" tests/unit tests/sites "$@"
fi
workers=${ORCH_TEST_WORKERS:-$(( $(nproc) * 2 ))}
parallel=(-n "$workers" --dist loadgroup)
for arg in "$@"; do
  # The caller's own -n, -m or -p no:xdist wins: one pass, as they asked.
  case "$arg" in
    -n|-n*|--numprocesses*|no:xdist|-pno:xdist|-m|-m*) exec .venv/bin/python -m pytest "$@" ;;
  esac
done
[ "$workers" = 0 ] && exec .venv/bin/python -m pytest "$@"

.venv/bin/python -m pytest "${parallel[@]}" -m "not measures" "$@"
first=$?
.venv/bin/python -m pytest -m measures "$@"
second=$?
# pytest exits 5 when a pass selects no test (a path given with no measuring test in it).
[ "$first" = 5 ] && [ "$second" != 5 ] && first=0
[ "$second" = 5 ] && [ "$first" != 5 ] && second=0
[ "$first" != 0 ] && exit "$first"
exit "$second"
