"""The results database: models, connection, migrations and the writes each stage makes."""
