"""docs/studies.md: the map from each study figure to its example, view or query and report figure.

The table's columns are fixed (Item, Study figure / table, Example, View / query, Report figure,
Missing). Every example, view, query and report figure a row names must exist, and every
experiment of shared/reference/studies.md (A.1 .. E.2) must have a row.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from orchestrator.results.report.figures import BUILDERS
from tests.conftest import REPO

DOC = REPO / "docs" / "studies.md"
COLUMNS = ["Item", "Study figure / table", "Example", "View / query", "Report figure", "Missing"]
# The reference lives beside the repository (/work/shared); a copy of its numbering is kept here
# so the test runs from a checkout alone, and is checked against the reference where it is found.
REFERENCE_ITEMS = {"A": 6, "B": 6, "C": 5, "D": 3, "E": 2}
REFERENCE = REPO.parent / "shared" / "reference" / "studies.md"


def table(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS, header
    assert set(lines[1].replace("|", "").strip()) <= set("- "), lines[1]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == len(COLUMNS), line
        rows.append(dict(zip(COLUMNS, cells)))
    return rows


def names(cell: str) -> list[str]:
    return [] if cell in ("—", "") else [part.strip() for part in cell.split(",")]


def reference_items(text: str) -> set[str]:
    items: set[str] = set()
    study = None
    for line in text.splitlines():
        head = re.match(r"## ([A-E])\. ", line)
        if head:
            study = head.group(1)
        number = re.match(r"(\d+)\. ", line)
        if study and number:
            items.add(f"{study}.{number.group(1)}")
    return items


def views() -> set[str]:
    found: set[str] = set()
    for path in (REPO / "db" / "views").glob("*.sql"):
        found |= {m.lower() for m in re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(\w+)", path.read_text(), re.I)}
    return found


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return table(DOC.read_text())


def test_every_reference_experiment_has_a_row(rows: list[dict[str, str]]) -> None:
    expected = {f"{s}.{i}" for s, n in REFERENCE_ITEMS.items() for i in range(1, n + 1)}
    if REFERENCE.exists():
        assert reference_items(REFERENCE.read_text()) == expected
    items = {row["Item"] for row in rows}
    assert expected - items == set(), sorted(expected - items)
    assert items - expected == set(), sorted(items - expected)


def test_every_named_example_view_query_and_figure_exists(rows: list[dict[str, str]]) -> None:
    known_views = views()
    assert {"results", "scaling", "cost"} <= known_views
    for row in rows:
        for example in names(row["Example"]):
            assert (REPO / "examples" / example).is_file(), (row["Item"], example)
        for source in names(row["View / query"]):
            kind, _, name = source.partition(":")
            assert kind in ("view", "query"), (row["Item"], source)
            if kind == "view":
                assert name in known_views, (row["Item"], source)
            else:
                assert (REPO / "db" / "queries" / name).is_file(), (row["Item"], source)
        for figure in names(row["Report figure"]):
            assert figure in BUILDERS, (row["Item"], figure)
        assert row["Missing"], row["Item"]


def test_every_study_example_is_in_the_table(rows: list[dict[str, str]]) -> None:
    named = {example for row in rows for example in names(row["Example"])}
    files = {p.name for p in (REPO / "examples").glob("[A-E][0-9]-*.yaml")}
    assert files - named == set(), sorted(files - named)


def not_planned_missing(rows: list[dict[str, str]], example: str, data: dict[str, Any]) -> list[str]:
    """The ``what`` of each of the example's ``not_planned`` items that no row naming the example
    lists in its Missing cell."""
    cells = [row["Missing"] for row in rows if example in names(row["Example"])]
    items = data.get("not_planned") or []
    assert isinstance(items, list), example
    return [item["what"] for item in items if not any(item["what"] in cell for cell in cells)]


def test_missing_column_lists_every_not_planned_item_of_the_examples(rows: list[dict[str, str]]) -> None:
    """Each value of a study setup an example does not plan (its not_planned list, issue 47) is
    named, by its ``what``, in the Missing column of a row of that example."""
    unlisted = {}
    for path in sorted((REPO / "examples").glob("[A-E]*-*.yaml")):
        absent = not_planned_missing(rows, path.name, yaml.safe_load(path.read_text()))
        if absent:
            unlisted[path.name] = absent
    assert not unlisted, unlisted


def test_the_not_planned_check_fails_on_an_unlisted_item() -> None:
    rows = [{"Example": "X.yaml", "Missing": "one thing; SN30 two instances per RDU"}]
    data = {"not_planned": [{"what": "SN30 two instances per RDU"}, {"what": "CS-2 opt level"}]}
    assert not_planned_missing(rows, "X.yaml", data) == ["CS-2 opt level"]
    assert not_planned_missing(rows, "Y.yaml", data) == ["SN30 two instances per RDU", "CS-2 opt level"]


def test_the_checks_fail_on_a_bad_table() -> None:
    bad = "\n".join(["| " + " | ".join(COLUMNS) + " |", "|---|---|---|---|---|---|",
                     "| A.1 | x | NO-SUCH.yaml | view:results | throughput | — |"])
    (row,) = table(bad)
    assert not (REPO / "examples" / names(row["Example"])[0]).is_file()
    with pytest.raises(AssertionError):
        table("| Item | Example |\n|---|---|\n| A.1 | x |")
    assert reference_items("## A. x\n1. one\n2. two\n## B. y\n1. three\n") == {"A.1", "A.2", "B.1"}
