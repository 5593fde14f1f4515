"""The command line's questions to the database (orchestrator/results/queries.py), on a real SQLite
file: rows come back by column name, a person's SQL is read-only unless allowed, and only the
listed views can be spliced into an export's query."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.errors import UserError
from orchestrator.results import EXPORTABLE, queries, references
from orchestrator.results.db.engine import open_engine, session_factory


@pytest.fixture
def sessions(tmp_path: Path) -> "sessionmaker[Session]":
    return session_factory(open_engine(f"sqlite:///{tmp_path / 'orch.db'}"))


def test_reference_rows_come_back_by_name(sessions: "sessionmaker[Session]") -> None:
    spec = references.ReferenceSpec(workload="gemm", metric="tflops", value=12.5, source="a datasheet", devices=2)
    with sessions.begin() as session:
        references.store(session, [spec])
    [row] = queries.reference_rows(sessions)
    assert list(row) == list(queries.REFERENCE_COLUMNS)
    assert (row["workload"], row["metric"], row["value"], row["devices"], row["source"]) == \
        ("gemm", "tflops", 12.5, 2, "a datasheet")


def test_an_export_reads_only_a_listed_view(sessions: "sessionmaker[Session]") -> None:
    for view in EXPORTABLE:
        columns, rows = queries.view_rows(sessions, view, "no-such-sweep")
        assert columns and rows == []
    with pytest.raises(ValueError, match="not an exportable view"):
        queries.view_rows(sessions, "runs; DROP TABLE runs", None)


def test_a_query_is_read_only_unless_written_on_purpose(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'orch.db'}"
    writer = open_engine(url)
    with pytest.raises(UserError, match="read-only"):
        queries.run_query(open_engine(url, read_only=True), "DELETE FROM runs", write=False, max_rows=10)
    answer = queries.run_query(writer, "DELETE FROM runs", write=True, max_rows=10)
    assert answer.columns is None and answer.affected == 0
    capped = queries.run_query(writer, "WITH RECURSIVE n(i) AS (VALUES (1) UNION ALL SELECT i + 1 FROM n "
                               "WHERE i < 5) SELECT i FROM n", write=False, max_rows=3)
    assert (capped.columns, capped.rows, capped.more) == (["i"], [[1], [2], [3]], True)
    with pytest.raises(UserError, match="SQL error"):
        queries.run_query(writer, "SELECT nothing FROM nowhere", write=False, max_rows=0)
