"""Results: metrics files validated and ingested, the database and its views, the glossary,
references and the report."""
