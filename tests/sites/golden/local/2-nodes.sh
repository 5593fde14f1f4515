# skipped: 8 devices requested, local has at most 4 (1 node(s) x 4)
