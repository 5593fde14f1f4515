"""Planning: a sweep file parsed, expanded into runs, each resolved on its site, rendered to a batch
script and recorded."""
