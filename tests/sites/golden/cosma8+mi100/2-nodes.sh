# skipped: 2 devices requested, cosma8:mi100 has at most 1 (1 node(s) x 1)
