"""benchmarks/suite_times.py: the CPU report sums what each test spent, by directory, costliest first."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.suite_times import cpu_report


def test_cpu_report_sums_by_directory_and_ranks_tests(tmp_path: Path) -> None:
    lines = [{"test": "suite/e2e/test_a.py::t1", "group": "g", "wall": 10.0, "cpu_self": 1.0, "cpu_children": 4.0},
             {"test": "suite/e2e/test_b.py::t2", "group": "g", "wall": 3.0, "cpu_self": 0.5, "cpu_children": 0.5},
             {"test": "suite/unit/test_c.py::t3", "group": "g", "wall": 1.0, "cpu_self": 7.0, "cpu_children": 0.0}]
    path = tmp_path / "cpu.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in lines) + "\n")
    text = "\n".join(cpu_report(path, top=2))
    assert "CPU of the tests: 13 s over 3 tests (wall summed 14 s)" in text
    rows = [line for line in text.splitlines() if line.startswith("| `suite/")]
    assert rows == ["| `suite/unit` | 1 | 1 | 7 |", "| `suite/e2e` | 2 | 13 | 6 |"]
    ranked = [line for line in text.splitlines() if line.startswith("| 7 |") or line.startswith("| 5 |")]
    assert ranked == ["| 7 | 1 | `suite/unit/test_c.py::t3` |", "| 5 | 10 | `suite/e2e/test_a.py::t1` |"]
    assert "test_b.py" not in text.split("spent the most CPU")[1]  # top=2
