# skipped: 8 devices requested, stanage:a100 has at most 4 (1 node(s) x 4)
