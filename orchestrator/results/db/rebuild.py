"""Rebuilding ``result_rows`` (the table behind the ``results`` view) from the provenance tables.

``result_rows`` is derived data: one row per ended attempt, written by
:func:`orchestrator.results.db.results.record_results` when the attempt ends. If it is emptied or
edited by hand (``orch sql --write "DELETE FROM result_rows"``), ``orch db rebuild-results``
writes it again from ``runs``, ``attempts`` and ``metrics`` through that same function, so a
rebuilt row is exactly the row the attempt's end wrote. One transaction: readers see the old
rows until the new ones are committed, and an interrupted rebuild changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select, text
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.results.db.models import Attempt
from orchestrator.results.db.results import record_results
from orchestrator.states import AttemptState

CHUNK = 5000


def rebuild_results(sessions: "sessionmaker[Session]",
                    progress: Callable[[int, int], None] | None = None) -> int:
    """Rewrite every result row from the tables (idempotent); returns how many attempts have
    one. ``progress(done, total)`` is called after each chunk of attempts."""
    with sessions.begin() as session:
        ended = (AttemptState.COMPLETED, AttemptState.FAILED)
        ids = list(session.scalars(select(Attempt.id).where(Attempt.state.in_(ended)).order_by(Attempt.id)))
        # Rows of attempts that no longer ended (or no longer exist) go too.
        session.execute(text("DELETE FROM result_rows"))
        if progress:
            progress(0, len(ids))
        for start in range(0, len(ids), CHUNK):
            record_results(session, ids[start:start + CHUNK])
            if progress:
                progress(min(start + CHUNK, len(ids)), len(ids))
    return len(ids)
