"""Every account and environment a built-in profile reads, set to a placeholder.

Planning every example as a user who holds every account would (no run refused for a missing
account or environment): the pre-traced shapes' build (scripts/pretrace.py) and the tests that plan
every example read it. The profiles name these as ``${ORCH_...}`` references.
"""

from __future__ import annotations

import re

from orchestrator.paths import builtin_sites_dir

# Variables the profiles read that choose where orch looks, not what a user's account holds.
NOT_PLACEHOLDERS = frozenset({"ORCH_HOME", "ORCH_SITES_PATH", "ORCH_LOCAL_CORES"})
# Variables that name a software environment (a path), not an account (a name).
ENV_SUFFIXES = ("_VENV", "_CONDA_ENV", "_SDK")


def placeholder_env() -> dict[str, str]:
    """Every ORCH_* variable a built-in profile reads: accounts set to a name, environments to a path."""
    names: set[str] = set()
    for profile in builtin_sites_dir().glob("*.yaml"):
        names |= set(re.findall(r"ORCH_[A-Z0-9_]+", profile.read_text()))
    env = {"OMP_NUM_THREADS": "1"}
    for name in sorted(names - NOT_PLACEHOLDERS):
        env[name] = "/opt/orch-test/env" if name.endswith(ENV_SUFFIXES) else "orchtest"
    return env
