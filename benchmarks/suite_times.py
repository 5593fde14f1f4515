"""Where the test suite's time goes, and proof that a faster suite kept every test and assert.

Reads what one suite run wrote: pytest's ``--durations=0`` report (the run's output, a text
file) and, where the run set ``ORCH_TEST_FIXTURE_TIMES=FILE``, one JSON line per fixture set-up.
Prints the wall time, the slowest tests (set-up + call + teardown), the costliest fixtures and
the count of tests and of ``assert`` statements in the tree, as Markdown for RESULTS.md.

    ORCH_TEST_FIXTURE_TIMES=/tmp/fixtures.jsonl ORCH_TEST_CPU_TIMES=/tmp/cpu.jsonl \
        ./scripts/test.sh -q --durations=0 > /tmp/suite.log
    .venv/bin/python -m benchmarks.suite_times /tmp/suite.log --fixtures /tmp/fixtures.jsonl --cpu /tmp/cpu.jsonl

``--cpu`` reads ORCH_TEST_CPU_TIMES's lines (each test's wall time and the CPU seconds of its worker
and of the processes it waited for): on a machine of few cores the suite's CPU, not its waits,
bounds how short a parallel run can be, and this says which tests spend it.

``--tree DIR`` counts another checkout's tests (the commit before a change, say): the counts of
two trees side by side show that no test and no assert went away.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*)$")
SUMMARY = re.compile(r"\b(\d+) passed\b.*? in (\d+(?:\.\d+)?)s")


def durations(log: str) -> dict[str, dict[str, float]]:
    """test id -> {phase: seconds} from pytest's --durations report."""
    tests: dict[str, dict[str, float]] = defaultdict(dict)
    for line in log.splitlines():
        match = DURATION.match(line)
        if match:
            seconds, phase, test = match.groups()
            tests[test.strip()][phase] = float(seconds)
    return tests


def wall_seconds(log: str) -> float | None:
    """The wall time of every pytest pass in the log, added (scripts/test.sh runs two)."""
    found = [float(m.group(2)) for m in map(SUMMARY.search, log.splitlines()) if m]
    return sum(found) if found else None


def fixture_totals(path: Path) -> list[tuple[str, str, int, float]]:
    """(fixture, scope, set-ups, total seconds), costliest first."""
    totals: dict[tuple[str, str], list[float]] = defaultdict(list)
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            totals[(row["fixture"], row["scope"])].append(row["seconds"])
    rows = [(name, scope, len(times), sum(times)) for (name, scope), times in totals.items()]
    return sorted(rows, key=lambda r: -r[3])


def cpu_report(path: Path, top: int) -> list[str]:
    """The CPU the tests spent (their worker's and their waited-for processes'), by directory and the
    costliest tests: what bounds a parallel suite on few cores."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    spent = {r["test"]: r["cpu_self"] + r["cpu_children"] for r in rows}
    by_dir: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        entry = by_dir["/".join(r["test"].split("/")[:2])]
        entry[0] += 1
        entry[1] += r["wall"]
        entry[2] += spent[r["test"]]
    lines = ["", f"CPU of the tests: {sum(spent.values()):.0f} s over {len(rows)} tests "
                 f"(wall summed {sum(r['wall'] for r in rows):.0f} s); by directory:", "",
             "| directory | tests | wall s (summed) | CPU s |", "|---|---:|---:|---:|"]
    lines += [f"| `{d}` | {n} | {wall:.0f} | {cpu:.0f} |"
              for d, (n, wall, cpu) in sorted(by_dir.items(), key=lambda kv: -kv[1][2])]
    lines += ["", f"The {top} tests that spent the most CPU:", "", "| CPU s | wall s | test |", "|---:|---:|---|"]
    walls = {r["test"]: r["wall"] for r in rows}
    lines += [f"| {cpu:.0f} | {walls[test]:.0f} | `{test}` |"
              for test, cpu in sorted(spent.items(), key=lambda kv: -kv[1])[:top]]
    return lines


def census(tree: Path) -> tuple[int, int]:
    """(test functions, assert statements) in tree/tests: what a faster suite must not lose."""
    tests = asserts = 0
    for path in sorted((tree / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assert):
                asserts += 1
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                tests += 1
    return tests, asserts


def report(log_path: Path, fixtures: Path | None, tree: Path, top: int, cpu: Path | None = None) -> str:
    log = log_path.read_text(errors="replace")
    tests = durations(log)
    wall = wall_seconds(log)
    lines = [f"- wall time of the run: {wall:.0f} s" if wall is not None else "- wall time: not in the log"]
    n_tests, n_asserts = census(tree)
    lines.append(f"- tree {tree}: {n_tests} test functions, {n_asserts} assert statements")
    summed = sum(sum(p.values()) for p in tests.values())
    lines.append(f"- test phases timed: {len(tests)} tests, {summed:.0f} s summed")
    lines += ["", f"The {top} slowest tests (set-up + call + teardown, seconds):", "",
              "| seconds | set-up | test |", "|---:|---:|---|"]
    ranked = sorted(tests.items(), key=lambda kv: -sum(kv[1].values()))[:top]
    lines += [f"| {sum(p.values()):.1f} | {p.get('setup', 0.0):.1f} | `{test}` |" for test, p in ranked]
    if fixtures is not None and fixtures.exists():
        lines += ["", "Fixture set-ups (costliest first; a session fixture runs once per worker):", "",
                  "| fixture | scope | set-ups | seconds |", "|---|---|---:|---:|"]
        lines += [f"| `{name}` | {scope} | {count} | {total:.1f} |"
                  for name, scope, count, total in fixture_totals(fixtures)[:top] if total >= 0.5]
    if cpu is not None and cpu.exists():
        lines += cpu_report(cpu, top)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="the suite run's output, with pytest --durations=0")
    parser.add_argument("--fixtures", type=Path, help="the ORCH_TEST_FIXTURE_TIMES file of the same run")
    parser.add_argument("--cpu", type=Path, help="the ORCH_TEST_CPU_TIMES file of the same run")
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose tests are counted")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print(report(args.log, args.fixtures, args.tree, args.top, args.cpu))


if __name__ == "__main__":
    main()
