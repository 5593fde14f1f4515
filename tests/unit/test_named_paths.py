"""Every file of the repository that code, docs and templates name by path exists.

Why: the tree moved into stage packages once (the CLI module became orchestrator/cli/app.py, the
memory model left workloads/ for orchestrator/predict/memory.py, ...) and a docstring that points
to a file that is gone sends a reader nowhere. benchmarks/RESULTS.md is a log: its entries name the files of
their day, and are not checked.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"(?<![\w./-])((?:orchestrator|workloads|tests|benchmarks|scripts|templates|db|sites|examples)"
                   r"/[\w/.-]*\.(?:py|j2|sql|sh|yaml))")
SUFFIXES = (".py", ".md", ".sh", ".j2", ".toml", ".yaml", ".sql")
# RESULTS.md is a log; this file names paths as data; the published figures name files of other
# repositories (where each figure was read).
LOGS = {"benchmarks/RESULTS.md", "tests/unit/test_named_paths.py", "benchmarks/published/figures.yaml"}
# Named on purpose as they were: bench_plan.py searches the history before the move for them.
HISTORICAL = {("benchmarks/bench_plan.py", "orchestrator/cli.py")}


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if f.endswith(SUFFIXES) and f not in LOGS and (REPO / f).is_file()]


# A worked example's code block says which file it makes (```python extending:NAME new=PATH,
# docs/extending.md): the page names those files before they exist, on purpose.
MADE_BY_EXAMPLE = re.compile(r"^```\S*.* new=(\S+)", re.M)


def test_every_named_path_exists() -> None:
    missing = []
    for name in tracked_files():
        text = (REPO / name).read_text(errors="replace")
        made = set(MADE_BY_EXAMPLE.findall(text))
        for match in NAMED.finditer(text):
            path = match.group(1).rstrip(".")
            if not (REPO / path).exists() and (name, path) not in HISTORICAL and path not in made:
                missing.append(f"{name} names {path}")
    assert not missing, "paths named but not in the tree:\n" + "\n".join(sorted(set(missing)))
