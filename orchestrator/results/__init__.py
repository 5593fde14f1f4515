"""Results: metrics files validated and ingested, the database and its views, the glossary,
references and the report."""

# What `orch export` writes: every view (orchestrator/results/db/views.py) and the two tables a
# person reads. Here, not in queries.py, so that the command line names them without importing
# SQLAlchemy at start-up.
EXPORTABLE = ("results", "throughput", "repeat_spread", "scaling", "cost", "provenance", "inference",
              "prediction_error", "reference_check", "serving", "runs", "attempts")
