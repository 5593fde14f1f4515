# skipped: 4 devices requested, stanage has at most 2 (1 node(s) x 2)
