"""`orch sql` is read-only and bounded (issue 30): no statement opens or creates another file,
no result fills the memory, no value grows without bound."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_orch

ENV = {"ORCH_HOME": "home"}


def sql(workdir: Path, *args: str) -> tuple[int, str, str]:
    proc = run_orch("sql", *args, cwd=workdir, env=ENV)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def test_attach_and_vacuum_into_create_no_file(workdir: Path) -> None:
    assert sql(workdir, "SELECT 1")[0] == 0  # the database exists
    code, _, err = sql(workdir, "ATTACH DATABASE 'made.db' AS x")
    assert code == 2 and "ATTACH and VACUUM INTO are refused" in err, err
    code, _, err = sql(workdir, "VACUUM INTO 'copy.db'")  # refused one way or another: a transaction is open
    assert code == 2 and err.startswith("error: "), err
    assert not (workdir / "made.db").exists() and not (workdir / "copy.db").exists()
    # --write is the user's own decision: the statement runs.
    assert sql(workdir, "--write", "ATTACH DATABASE 'made.db' AS x")[0] == 0


def test_a_result_is_capped_and_says_so(workdir: Path) -> None:
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
    code, out, err = sql(workdir, "--format", "csv", "--max-rows", "50", endless)
    assert code == 0 and out.splitlines() == ["x", *map(str, range(1, 51))]
    assert "only the first 50 rows are shown" in err
    # The default cap stops an endless query too (100,000 rows), rather than reading forever.
    code, out, err = sql(workdir, "--format", "csv", endless)
    assert code == 0 and len(out.splitlines()) == 100_001 and "only the first 100000 rows" in err
    code, out, err = sql(workdir, "--format", "csv", "--max-rows", "0",
                         "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 7) SELECT x FROM c")
    assert code == 0 and len(out.splitlines()) == 8 and not err
    assert "--max-rows: expected 0" in sql(workdir, "--max-rows", "-1", "SELECT 1")[2]


def test_no_value_grows_past_the_readers_limit(workdir: Path) -> None:
    code, _, err = sql(workdir, "SELECT length(zeroblob(200000000))")
    assert code == 2 and err.startswith("error: SQL error: string or blob too big"), err
